"""``pods/exec`` over the websocket channel protocols (``v5.channel.k8s.io``, ``v4.channel.k8s.io``).

What kubectl (1.30+) and the Python clients' ``stream()`` speak: a websocket whose binary frames
start with a channel byte (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize; v5 adds 255 "close
channel" so a client can end stdin). When the command ends the server writes a ``Status`` on the
error channel (``Success``, or ``NonZeroExitCode`` with the exit code as the ``ExitCode`` cause)
and closes the connection.

The command runs as a local process in the pod's process context, like the kubelet stand-in runs
containers: the container's environment (``POD_IP`` & co included) and working directory.
Checks that answer before the upgrade, as kube-apiserver does: 404 for a missing pod, 400 for
no command, an unknown or ambiguous container, a completed pod, a container not running yet, or
a request that is not a websocket upgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import WSMsgType, web

from . import status
from .kubelet import Kubelet
from .paths import Target
from .store import Store

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _container(pod: dict[str, Any], wanted: str | None) -> str:
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    name = pod["metadata"]["name"]
    if not wanted:
        if len(names) != 1:
            raise status.bad_request(
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
            )
        return names[0]
    if wanted not in names:
        raise status.bad_request(f"container {wanted} is not valid for pod {name}")
    return wanted


def exit_status(code: int, command: list[str]) -> dict[str, Any]:
    """The error-channel Status for an exit code (what the Python client's ``returncode`` reads)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command "
        f"[{' '.join(command)}], exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def start_failure(command: list[str], exc: OSError) -> dict[str, Any]:
    """The error-channel Status when the command cannot be started (as the runtime reports it)."""
    message = (
        "OCI runtime exec failed: exec failed: unable to start container process: "
        f'exec: "{command[0]}": {exc.strerror or exc}: unknown'
    )
    return {
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    }


async def serve_exec(request: web.Request, store: Store, kubelet: Kubelet, t: Target) -> web.StreamResponse:
    """Handle ``GET|POST .../pods/<name>/exec?command=...&stdout=true...``."""
    q = request.query
    pod = store.get(t.rtype, t.namespace, t.name)  # type: ignore[arg-type]
    command = q.getall("command", [])
    if not command:
        raise status.bad_request("you must specify at least 1 command")
    container = _container(pod, q.get("container"))
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        raise status.bad_request(f"cannot exec into a container in a completed pod; current phase is {phase}")
    context = kubelet.exec_context(pod["metadata"]["uid"], container)
    if context is None:
        raise status.bad_request(f'unable to upgrade connection: container not found ("{container}")')
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise status.bad_request("Upgrade request required")
    ws = web.WebSocketResponse(protocols=PROTOCOLS, autoping=True)
    await ws.prepare(request)
    if ws.ws_protocol not in PROTOCOLS:
        await ws.close(message=b"unsupported subprotocol")
        return ws
    env, cwd = context
    use_stdin = _truthy(q.get("stdin"))
    tty = _truthy(q.get("tty"))
    want_out, want_err = _truthy(q.get("stdout")), _truthy(q.get("stderr"))
    try:
        proc = await asyncio.create_subprocess_exec(
            *kubelet.exec_prefix(pod["metadata"]["uid"], container, cwd),
            *command,
            env=env,
            cwd=cwd,
            stdin=asyncio.subprocess.PIPE if use_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if tty else asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        await ws.send_bytes(bytes([ERROR]) + json.dumps(start_failure(command, exc)).encode())
        await ws.close()
        return ws

    async def pump(stream: asyncio.StreamReader | None, channel: int, wanted: bool) -> None:
        while stream is not None:
            chunk = await stream.read(32 * 1024)
            if not chunk:
                return
            if wanted and not ws.closed:
                await ws.send_bytes(bytes([channel]) + chunk)

    async def feed() -> None:
        async for msg in ws:
            # the Python client sends str data as text frames: the channel is then the first character
            raw = msg.data.encode() if msg.type == WSMsgType.TEXT else msg.data
            if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT) or not raw:
                continue
            channel, data = raw[0], raw[1:]
            if channel == STDIN and proc.stdin is not None and data:
                proc.stdin.write(data)
                with contextlib.suppress(ConnectionError):
                    await proc.stdin.drain()
            elif channel == CLOSE and data[:1] == bytes([STDIN]) and proc.stdin is not None:
                proc.stdin.close()
        if proc.returncode is None:  # the client went away: end the command, as the kubelet does
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    feeder = asyncio.ensure_future(feed())
    try:
        await asyncio.gather(pump(proc.stdout, STDOUT, want_out), pump(proc.stderr, STDERR, want_err))
        code = await proc.wait()
        if not ws.closed:
            await ws.send_bytes(bytes([ERROR]) + json.dumps(exit_status(code, command)).encode())
            await ws.close()
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await feeder
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    return ws
