/**
 * Event ids in the node's own form: `evt_` + a ULID (https://github.com/ulid/spec): 48
 * bits of Unix milliseconds then 80 random bits, 26 characters of Crockford base32. The
 * client chooses the id of each publish so that every retry, in any region, names the
 * same event (README "Region failover").
 */

import { randomFillSync } from "node:crypto";

const ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/**
 * What the node takes as a publish body's id (a ULID). Not every event id matches it: an
 * inbound source's event ids are hashes in the same alphabet, with any first digit.
 */
export const EVENT_ID_PATTERN = /^evt_[0-7][0-9A-HJKMNP-TV-Z]{25}$/;

/** A ULID of `timeMs` (0 <= timeMs < 2^48) and 10 random bytes (`random` when given). */
export function ulid(timeMs: number, random?: Uint8Array): string {
  if (!Number.isInteger(timeMs) || timeMs < 0 || timeMs >= 2 ** 48) {
    throw new RangeError(`ULID time out of range: ${timeMs}`);
  }
  const bytes = random ?? randomFillSync(new Uint8Array(10));
  if (bytes.length !== 10) throw new RangeError("ULID randomness is 10 bytes");
  let out = "";
  let t = timeMs;
  for (let i = 0; i < 10; i++) {
    out = ALPHABET[t % 32] + out;
    t = Math.floor(t / 32);
  }
  // 80 bits -> 16 characters, 5 bits each, most significant first
  let acc = 0;
  let bits = 0;
  for (const b of bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += ALPHABET[(acc >> bits) & 31];
    }
    acc &= (1 << bits) - 1;
  }
  return out;
}

/** A new event id `evt_<ULID>`. */
export function newEventId(nowMs: number = Date.now(), random?: Uint8Array): string {
  return `evt_${ulid(nowMs, random)}`;
}
