export {
  type AcceptedEvent,
  type ApiGroups,
  type CallOptions,
  Client,
  type ClientOptions,
  type FailoverInfo,
  type Json,
  type JsonObject,
  type Page,
  type PublishOptions,
} from "./client.js";
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
