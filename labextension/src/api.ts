/**
 * Requests to this server's classhub endpoints (hub_ext.singleuser.panel).
 *
 * The browser talks only to the server it is on, with the server's own cookie and XSRF token
 * (ServerConnection adds both): it never holds a hub token.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** A refusal or failure, with the sentence the server gave. */
export class ClasshubError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

/** Call ``api/classhub/panel/<path>``; the answer's JSON, or a ClasshubError with its message. */
export async function panelRequest<T = any>(
  path: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, 'api/classhub/panel', path);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ClasshubError(`This server cannot be reached: ${error}`, 0);
  }
  const text = await response.text();
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { message: text };
  }
  if (!response.ok) {
    const message =
      (data && (data.message || data.reason)) || `classhub answered ${response.status}`;
    throw new ClasshubError(message, response.status);
  }
  return data as T;
}

/** Call the classhub service through the owner's relay (``service/<path>``). */
export function serviceRequest<T = any>(
  path: string,
  method = 'GET',
  body?: unknown
): Promise<T> {
  const init: RequestInit = { method };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers = { 'Content-Type': 'application/json' };
  }
  return panelRequest<T>(`service/${path}`, init);
}

/**
 * A text answer of the service through the owner's relay (a job's log), as bytes: the caller
 * counts them for the next ``offset`` and decodes them (a chunk may end inside a character).
 */
export async function serviceBytes(
  path: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<Uint8Array> {
  const url = URLExt.join(settings.baseUrl, 'api/classhub/panel/service', path);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, {}, settings);
  } catch (error) {
    throw new ClasshubError(`This server cannot be reached: ${error}`, 0);
  }
  if (!response.ok) {
    const text = await response.text();
    let message = `classhub answered ${response.status}`;
    try {
      const data = JSON.parse(text);
      message = (data && (data.message || data.reason)) || message;
    } catch {
      message = text || message;
    }
    throw new ClasshubError(message, response.status);
  }
  return new Uint8Array(await response.arrayBuffer());
}
