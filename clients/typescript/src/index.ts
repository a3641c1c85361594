export {
  type AcceptedEvent,
  type ApiGroups,
  type CallOptions,
  Client,
  type ClientOptions,
  type FailoverInfo,
  type JsonObject,
  type Page,
  type PublishOptions,
  type ResultOf,
} from "./client.js";
export type * from "./schema.js";
export { ApiError, type AttemptRecord, type Problem, UnavailableError } from "./errors.js";
export {
  backoffMs,
  DEFAULT_POLICY,
  type FailoverPolicy,
  type Outcome,
  parseRetryAfter,
  RegionPool,
  verdict,
} from "./failover.js";
export { OPERATIONS, type OperationName, type OperationSpec, fillPath, pathParams } from "./operations.js";
export { Transport, type TransportOptions } from "./transport.js";
export { EVENT_ID_PATTERN, newEventId, ulid } from "./ulid.js";
