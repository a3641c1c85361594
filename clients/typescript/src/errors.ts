/**
 * What a call can fail with. `ApiError`: a region answered with a status the caller must
 * handle (the RFC 9457-style problem body of docs/api.md: `error`, `detail`, `field`).
 * `UnavailableError`: no region gave a final answer within the attempts and the deadline;
 * `attempts` lists what each try came to.
 */

export interface Problem {
  readonly error?: string;
  readonly detail?: string;
  readonly field?: string | null;
  readonly [member: string]: unknown;
}

export class ApiError extends Error {
  override readonly name = "ApiError";

  constructor(
    readonly status: number,
    readonly problem: Problem,
    readonly region: string,
    readonly operation: string,
  ) {
    const what = problem.detail ?? problem.error ?? "no problem body";
    const field = problem.field ? ` (field ${problem.field})` : "";
    super(`${operation}: HTTP ${status} from ${region}: ${what}${field}`);
  }

  /** The problem's `error` code (e.g. "not_found", "idempotency_conflict"). */
  get code(): string | undefined {
    return this.problem.error;
  }

  get field(): string | null | undefined {
    return this.problem.field;
  }
}

export interface AttemptRecord {
  readonly region: string;
  readonly outcome: string;
  readonly startedAtMs: number;
  readonly elapsedMs: number;
}

export class UnavailableError extends Error {
  override readonly name = "UnavailableError";

  constructor(
    readonly operation: string,
    readonly attempts: readonly AttemptRecord[],
    reason: string,
  ) {
    const tried = attempts.map((a) => `${a.region}: ${a.outcome}`).join("; ");
    super(`${operation}: no region answered (${reason}) after ${attempts.length} attempts: ${tried}`);
  }
}
