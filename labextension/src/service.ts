/**
 * The classhub service's request bodies and answers that the panel sends and reads, taken from
 * the types generated from the service's OpenAPI document (api-types.ts, `make types`).
 *
 * Why: the service checks each JSON body with a pydantic model and the document's request schemas
 * are those models, so a field renamed or removed in the service stops this extension's build
 * instead of reaching a person as a 400.
 */
import type { paths } from './api-types';

type Path = keyof paths;
type Method<P extends Path> = Exclude<keyof paths[P], 'parameters'>;

/** The JSON body the operation ``method path`` takes. */
export type RequestBody<P extends Path, M extends Method<P>> = paths[P][M] extends {
  requestBody: { content: { 'application/json': infer B } };
}
  ? B
  : paths[P][M] extends { requestBody?: { content: { 'application/json': infer B } } }
    ? B
    : never;

/** The JSON the operation ``method path`` answers with ``status``. */
export type Answer<P extends Path, M extends Method<P>, S extends number = 200> = paths[P][M] extends {
  responses: { [K in S]: { content: { 'application/json': infer A } } };
}
  ? A
  : never;

/** The body of ``POST /api/jobs`` (a submission). */
export type JobSubmission = RequestBody<'/api/jobs', 'post'>;

/** The body of ``POST /api/shares`` (share my server). */
export type ShareRequest = RequestBody<'/api/shares', 'post'>;

/** A job as ``GET /api/jobs/{job}`` answers it. */
export type JobAnswer = Answer<'/api/jobs/{job}', 'get'>;

/** A page of jobs as ``GET /api/jobs`` answers it. */
export type JobPage = Answer<'/api/jobs', 'get'>;
