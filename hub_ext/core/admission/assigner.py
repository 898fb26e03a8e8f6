"""Where a gang goes: every replica on a node that fits it, all at once or not at all.

Why an index: a cycle over 1,000 nodes and 10,000 waiting jobs must answer "which node has 4 free
GPUs of this model?" thousands of times in well under 100 ms. `FreeIndex` keeps each node's free
capacity as exact integers (nano-units, as `ResourceVector` does) and buckets nodes by their free
amount of every GPU resource, per GPU model. A replica goes to the node with the *least* free
amount of its key resource that still fits the whole request (best fit, ties in bucket order):
small jobs fill holes and whole nodes stay free for the multi-node jobs that need them.

A placement is all-or-nothing (`place`): replicas are placed largest first, each one on the index
as updated by the ones before it (two replicas of 4 GPUs fit one node with 8 free, or two nodes
with 4 free each, never "8 free spread over three nodes"); if one replica finds no node, every
replica placed so far is taken back.

`extra` restricts some nodes further: the capacity on them that the reserved job does not need
at its start (see backfill.py).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hub_ext.core.admission.nodes import NodeState
from hub_ext.core.jobs import Job, Role
from hub_ext.core.quota import Limits
from hub_ext.core.resources import PODS, ResourceVector, human_quantity, is_gpu_resource

__all__ = ["NANO", "FreeIndex", "Placement", "nanos", "refuse_at_submit"]

NANO = 10**9
Need = tuple[tuple[str, int], ...]
Group = tuple[str, str | None]


def nanos(vector: ResourceVector) -> dict[str, int]:
    """A ResourceVector as exact nano-unit ints (the hot path's arithmetic)."""
    return {name: amount.numerator * NANO // amount.denominator for name, amount in vector.items()}


@dataclass(frozen=True)
class Placement:
    """replica -> node, for a backend to pin: ((role, replica index, node name), ...)."""

    replicas: tuple[tuple[str, int, str], ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        """The distinct nodes, in first-use order."""
        return tuple(dict.fromkeys(node for _, _, node in self.replicas))


def _role_order(role: Role) -> tuple[int, int, str]:
    key = role.key_resource
    amount = dict(role.need).get(key, 0) if key else 0
    return (-amount, -sum(a for _, a in role.need), role.name)


class FreeIndex:
    """Mutable working copy of per-node free capacity for one cycle (or one simulation).

    Copies share what they have not changed (copy on write): `clone()` costs a few list copies,
    not one dict per node, so the cycle, each reservation's replay and each preemption trial can
    take their own copy of 5,000 nodes (docs/jobs-loop.md). A node's `free` and bucket entry are
    replaced, never changed in place, once shared; a bucket is copied on its first change after a
    clone. `ClusterState` keeps one index between cycles and changes only the nodes that changed
    (`set_node`), so a cycle no longer builds it from every node.
    """

    __slots__ = ("_at", "_buckets", "_by_resource", "_keys", "_mine", "_strays", "_unsorted", "free",
                 "names", "ok", "pods", "positions", "products")

    def __init__(self, nodes: Sequence[NodeState] = ()) -> None:
        self.names: list[str] = [node.name for node in nodes]
        self.positions: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self.products: list[str | None] = [node.gpu_product for node in nodes]
        self.free: list[dict[str, int]] = [dict(node.free_nanos) for node in nodes]
        self.pods: list[bool] = [PODS in node.allocatable for node in nodes]
        self.ok: list[bool] = [node.schedulable for node in nodes]
        self._buckets: dict[Group, dict[int, dict[int, None]]] = {}
        self._keys: dict[Group, list[int]] = {}
        self._by_resource: dict[str, list[Group]] = {}
        self._mine: set[tuple[Group, int]] = set()
        """The buckets this copy alone holds (changed in place); the others are shared."""
        self._unsorted: set[tuple[Group, int]] = set()
        """Buckets `set_node` appended to out of node order (sorted again by `clone`)."""
        self._strays: frozenset[int] = frozenset()
        """Schedulable nodes whose free capacity names a GPU resource their allocatable does not
        (so no bucket holds them for it): `room` counts them one by one. None in a sane cluster."""
        self._at: list[dict[str, int]] = []
        for i, node in enumerate(nodes):
            self._at.append(self._enter(i, node))

    def _enter(self, i: int, node: NodeState) -> dict[str, int]:
        """Put node i (its `free` already set) in the buckets of its GPU resources."""
        at: dict[str, int] = {}
        if node.schedulable:
            free = self.free[i]
            for name in node.allocatable:
                if is_gpu_resource(name):
                    amount = free.get(name, 0)
                    at[name] = amount
                    self._insert((name, node.gpu_product), amount, i)
            if node.free is not node.allocatable:  # else every GPU it names is in `at`
                self._note_stray(i, at)
        return at

    def _note_stray(self, i: int, at: Mapping[str, int]) -> None:
        """Remember node i if its free capacity names a GPU resource outside its buckets."""
        for name in self.free[i]:
            if name not in at and _is_gpu(name):
                self._strays = self._strays | {i}
                return

    def clone(self) -> FreeIndex:
        """A copy to change freely; this index and the copy then share every bucket and node."""
        self._sort_buckets()
        other = object.__new__(FreeIndex)
        other.names, other.products, other.pods, other.ok = self.names, self.products, self.pods, self.ok
        other.positions = self.positions
        other.free = list(self.free)
        other._at = list(self._at)
        other._keys = {g: list(k) for g, k in self._keys.items()}
        other._by_resource = {r: list(gs) for r, gs in self._by_resource.items()}
        other._buckets = {g: dict(bs) for g, bs in self._buckets.items()}
        other._mine, other._unsorted = set(), set()
        other._strays = self._strays
        self._mine = set()
        return other

    def set_node(self, i: int, node: NodeState) -> None:
        """Node i changed (a watch event, a job started or ended): the index of `ClusterState`.

        The result is what `FreeIndex` of the new nodes would be: each bucket lists its nodes in
        node order (`find` takes the first that fits, so the order is part of the decision)."""
        if node.name != self.names[i]:
            raise ValueError(f"node {i} is {self.names[i]}, not {node.name}: build a new index")
        for name, old in self._at[i].items():
            group = (name, self.products[i])
            bucket = self._writable(group, old)
            del bucket[i]
            if not bucket:  # an index built afresh has no empty bucket
                del self._buckets[group][old]
                self._keys[group].remove(old)
                self._mine.discard((group, old))
                self._unsorted.discard((group, old))
        for attr, value in (("products", node.gpu_product), ("pods", PODS in node.allocatable),
                            ("ok", node.schedulable)):
            values = getattr(self, attr)
            if values[i] != value:  # shared with every copy: replaced, not changed
                values = list(values)
                values[i] = value
                setattr(self, attr, values)
        self.free[i] = dict(node.free_nanos)
        if i in self._strays:
            self._strays = self._strays - {i}
        at = self._enter(i, node)
        self._at[i] = at
        for name, amount in at.items():
            bucket = self._buckets[(name, node.gpu_product)][amount]
            if len(bucket) > 1:  # appended last: out of order unless the one before is smaller
                behind = reversed(bucket)
                next(behind)
                if next(behind) > i:
                    self._unsorted.add(((name, node.gpu_product), amount))

    def _sort_buckets(self) -> None:
        for group, amount in self._unsorted:
            bucket = self._buckets[group][amount]
            self._buckets[group][amount] = dict.fromkeys(sorted(bucket))
            self._mine.add((group, amount))
        self._unsorted.clear()

    # -- buckets
    def _writable(self, group: Group, amount: int) -> dict[int, None]:
        """Bucket (group, amount), copied first if another index shares it."""
        bucket = self._buckets[group][amount]
        if (group, amount) not in self._mine:
            bucket = self._buckets[group][amount] = dict(bucket)
            self._mine.add((group, amount))
        return bucket

    def _insert(self, group: Group, amount: int, i: int) -> None:
        buckets = self._buckets.get(group)
        if buckets is None:
            buckets = self._buckets[group] = {}
            self._keys[group] = []
            groups = self._by_resource.setdefault(group[0], [])
            groups.append(group)
            groups.sort(key=lambda g: (g[1] is None, g[1] or ""))
        if amount in buckets:
            bucket = self._writable(group, amount)
        else:
            bucket = buckets[amount] = {}
            self._mine.add((group, amount))
            insort(self._keys[group], amount)
        bucket[i] = None

    def _reindex(self, i: int) -> None:
        at, free, product = self._at[i], self.free[i], self.products[i]
        moved = None
        for name, old in at.items():
            new = free.get(name, 0)
            if new != old:
                del self._writable((name, product), old)[i]
                self._insert((name, product), new, i)
                if moved is None:
                    moved = dict(at)
                moved[name] = new
        if moved is not None:
            self._at[i] = moved

    def take(self, i: int, need: Need, sign: int = 1) -> None:
        """Subtract (sign 1) or give back (sign -1) one replica's request on node i."""
        before = self.free[i]
        free = self.free[i] = dict(before)
        for name, amount in need:
            free[name] = free.get(name, 0) - sign * amount
        if self.pods[i]:
            free[PODS] = free.get(PODS, 0) - sign * NANO
        if len(free) != len(before) and self.ok[i]:  # a resource new to the node
            self._note_stray(i, self._at[i])
        self._reindex(i)

    def release(self, i: int, held: Mapping[str, int]) -> None:
        """Give back what a whole job held on node i (pods slots included in `held`)."""
        before = self.free[i]
        free = self.free[i] = dict(before)
        for name, amount in held.items():
            free[name] = free.get(name, 0) + amount
        if len(free) != len(before) and self.ok[i]:  # a resource new to the node
            self._note_stray(i, self._at[i])
        self._reindex(i)

    # -- queries
    def fits(self, i: int, need: Need) -> bool:
        free = self.free[i]
        for name, amount in need:
            if free.get(name, 0) < amount:
                return False
        return not self.pods[i] or free.get(PODS, 0) >= NANO

    def max_free(self, resource: str, product: str | None) -> int:
        """The largest free amount of `resource` on one node (of `product`, when given)."""
        groups = [(resource, product)] if product is not None else self._by_resource.get(resource, ())
        best = 0
        for group in groups:
            buckets, keys = self._buckets.get(group), self._keys.get(group)
            if not buckets or not keys:
                continue
            for amount in reversed(keys):
                if amount <= best:
                    break
                if buckets[amount]:
                    best = amount
                    break
        return best

    def room(self, resource: str, product: str | None, amount: int) -> int:
        """How many replicas asking `amount` of GPU resource `resource` the schedulable nodes (of
        `product`, when given) could hold by that resource alone: the sum of free // amount.

        From the buckets (a few dozen amounts), not a loop over every node: the reservation
        search asks it once per reservation (backfill.py)."""
        groups = [(resource, product)] if product is not None else self._by_resource.get(resource, ())
        total = 0
        for group in groups:
            for have, bucket in self._buckets.get(group, {}).items():
                if bucket:
                    total += have // amount * len(bucket)
        for i in self._strays:
            if self.ok[i] and resource not in self._at[i] and product in (None, self.products[i]):
                total += self.free[i].get(resource, 0) // amount
        return total

    def free_gpus(self) -> dict[str, int]:
        """Per GPU resource, what the schedulable nodes have free in all (from the buckets)."""
        total: dict[str, int] = {}
        for (name, _product), buckets in self._buckets.items():
            for have, bucket in buckets.items():
                if bucket:
                    total[name] = total.get(name, 0) + have * len(bucket)
        for i in self._strays:
            if self.ok[i]:
                at = self._at[i]
                for name, amount in self.free[i].items():
                    if name not in at and _is_gpu(name):
                        total[name] = total.get(name, 0) + amount
        return total

    def max_free_any(self, limits: Mapping[int, Mapping[str, int]] | None = None) -> int:
        """The largest free amount of any GPU resource on any node (0 when no GPU is free).

        With `limits`, a node named there offers at most its limit (the capacity the reserved job
        leaves on it, for jobs that would still run when it starts).
        """
        best = 0
        for group, keys in self._keys.items():
            buckets = self._buckets[group]
            for amount in reversed(keys):
                if amount <= best:
                    break
                bucket = buckets[amount]
                if not bucket:
                    continue
                if not limits:
                    best = amount
                    break
                for i in bucket:
                    cap = amount if i not in limits else min(amount, limits[i].get(group[0], 0))
                    best = max(best, cap)
                    if cap == amount:
                        break
                if best == amount:
                    break
        return best

    def nodes_fitting(self, need: Need, key: str | None, product: str | None) -> int:
        """How many nodes could take one replica of `need` right now (for messages)."""
        return sum(1 for i in self._candidates(need, key, product) if self.fits(i, need))

    def _candidates(self, need: Need, key: str | None, product: str | None) -> Iterable[int]:
        if key is None:
            return (i for i in range(len(self.names)) if self.ok[i])
        amount = dict(need)[key]
        groups = [(key, product)] if product is not None else self._by_resource.get(key, ())
        return (
            i
            for group in groups if group in self._buckets
            for a in self._keys[group][bisect_left(self._keys[group], amount):]
            for i in self._buckets[group][a]
        )

    def find(self, need: Need, key: str | None, product: str | None,
             extra: Mapping[int, dict[str, int]] | None = None) -> int | None:
        """The best-fit node for one replica, or None."""
        if key is None:
            for i in range(len(self.names)):
                if (self.ok[i] and product in (None, self.products[i]) and self.fits(i, need)
                        and _extra_ok(extra, i, need)):
                    return i
            return None
        amount = dict(need)[key]
        groups = [(key, product)] if product is not None else self._by_resource.get(key, ())
        best: tuple[int, int] | None = None
        for group in groups:
            keys = self._keys.get(group)
            if not keys:
                continue
            buckets = self._buckets[group]
            for a in keys[bisect_left(keys, amount):]:
                if best is not None and a > best[0]:
                    break
                found = None
                for i in buckets[a]:
                    if self.fits(i, need) and _extra_ok(extra, i, need):
                        found = i
                        break
                if found is not None:
                    if best is None or (a, found) < best:
                        best = (a, found)
                    break
        return None if best is None else best[1]

    def place(self, job: Job, extra: dict[int, dict[str, int]] | None = None) -> Placement | None:
        """Place every replica of `job` and take its capacity, or take nothing and return None.

        With `extra`, nodes named in it must also fit the replica within their extra capacity,
        which is decremented too (and restored on failure).
        """
        taken: list[tuple[str, int, int, Need]] = []
        for role in sorted(job.roles, key=_role_order):
            need = role.need
            for r in range(role.replicas):
                i = self.find(need, role.key_resource, role.gpu_product, extra)
                if i is None:
                    for _, _, j, back in reversed(taken):
                        self.take(j, back, -1)
                        if extra is not None and j in extra:
                            _extra_take(extra[j], back, -1)
                    return None
                self.take(i, need)
                if extra is not None and i in extra:
                    _extra_take(extra[i], need, 1)
                taken.append((role.name, r, i, need))
        order = {role.name: n for n, role in enumerate(job.roles)}
        taken.sort(key=lambda t: (order[t[0]], t[1]))
        return Placement(tuple((role, r, self.names[i]) for role, r, i, _ in taken))

    def can_hold(self, role: Role) -> bool:
        """Cheap necessary condition: some node has at least one replica's key resource free."""
        key = role.key_resource
        if key is None:
            return True
        return self.max_free(key, role.gpu_product) >= dict(role.need)[key]


_GPU_NAMES: dict[str, bool] = {}


def _is_gpu(name: str) -> bool:
    """`is_gpu_resource`, remembered per name (asked for every node of a new index)."""
    gpu = _GPU_NAMES.get(name)
    if gpu is None:
        gpu = _GPU_NAMES[name] = is_gpu_resource(name)
    return gpu


def _extra_ok(extra: Mapping[int, dict[str, int]] | None, i: int, need: Need) -> bool:
    if extra is None or i not in extra:
        return True
    room = extra[i]
    return all(room.get(name, 0) >= amount for name, amount in need)


def _extra_take(room: dict[str, int], need: Need, sign: int) -> None:
    for name, amount in need:
        room[name] = room.get(name, 0) - sign * amount


def refuse_at_submit(
    job: Job,
    nodes: Sequence[NodeState],
    course_limits: Limits | None = None,
    user_limits: Limits | None = None,
) -> str | None:
    """Why `job` could never start, in one sentence; None when it could.

    A job is refused when its replicas cannot all be placed at once on the *empty* cluster (the
    same placement the cycle uses, so a job accepted here is one the cycle can admit once the
    cluster drains), or when it alone asks for more than a course or user ceiling.
    """
    for who, limits in (("your course", course_limits), ("you", user_limits)):
        if limits is None:
            continue
        for name, amount in job.total.items():
            cap = limits.ceiling(name)
            if cap is not None and amount > cap:
                return (
                    f"This job asks for {human_quantity(name, amount)} in all, and {who} may use "
                    f"at most {human_quantity(name, cap)}: ask for fewer replicas or less per replica."
                )
    empty = [
        NodeState(n.name, n.allocatable, n.allocatable, n.gpu_product, n.schedulable) for n in nodes
    ]
    index = FreeIndex(empty)
    for role in job.roles:
        if not any(index.fits(i, role.need) and (role.gpu_product in (None, index.products[i]))
                   for i in range(len(empty)) if index.ok[i]):
            where = f" {role.gpu_product}" if role.gpu_product else ""
            largest = _largest(empty, role)
            return (
                f"This job can never start: each replica of role {role.name} asks for "
                f"{role.request.human()}, and no{where} node has that much ({largest}). "
                "Split the work over more replicas with less each."
            )
    if index.place(job) is None:
        return (
            f"This job can never start: its {job.replicas} replicas ({job.describe()}) do not fit "
            f"the whole cluster at once, even with nothing else running. Ask for fewer replicas."
        )
    return None


def _largest(nodes: Sequence[NodeState], role: Role) -> str:
    key = role.key_resource
    if key is None:
        return f"{len(nodes)} nodes"
    amounts = [n.allocatable[key] for n in nodes
               if n.schedulable and role.gpu_product in (None, n.gpu_product)]
    if not amounts or max(amounts) == 0:
        return f"none offers {key}"
    return f"the largest offers {human_quantity(key, max(amounts))}"
