import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { CreateMaintenanceWindowRequest } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { storableText } from "../runtime/data/storable.js";
import { InvalidArgumentError } from "../runtime/errors.js";
import { isSourceBadge, SOURCE_BADGES } from "./vocabulary.js";

// The reason's length and the number of entities are bounded by the schema's rules; an entity's
// parts are bounded tighter here than a delivery's (the schema's Entity serves both).
export const MAINTENANCE_LIMITS = {
  entityPartCharacters: 200,
  listed: 1000,
};

export interface CheckedWindow {
  startsAt: Date;
  endsAt: Date;
  reason: string;
  sources: string[];
  entities: { kind: string; id: string }[];
}

function requiredTime(field: string, value: Timestamp | undefined): Date {
  if (!value) throw new InvalidArgumentError(`${field} is required (an RFC 3339 timestamp)`);
  const date = timestampDate(value);
  const year = date.getUTCFullYear();
  if (!(year >= 1 && year <= 9999)) throw new InvalidArgumentError(`${field} must be a time between the years 1 and 9999`);
  return date;
}

export function checkWindow(req: CreateMaintenanceWindowRequest): CheckedWindow {
  const startsAt = requiredTime("startsAt", req.startsAt);
  const endsAt = requiredTime("endsAt", req.endsAt);
  if (endsAt.getTime() <= startsAt.getTime()) throw new InvalidArgumentError("endsAt must be after startsAt");
  const reason = storableText(req.reason.trim());
  if (!reason) throw new InvalidArgumentError("reason is required");
  const sources: string[] = [];
  for (const source of req.match?.sources ?? []) {
    if (!isSourceBadge(source)) {
      throw new InvalidArgumentError(`match.sources: "${source.slice(0, 50)}" is not a source; use ${SOURCE_BADGES.join(", ")} or a custom source's name`);
    }
    if (!sources.includes(source)) sources.push(source);
  }
  const requested = req.match?.entities ?? [];
  const entities: { kind: string; id: string }[] = [];
  for (const entity of requested) {
    const kind = storableText(entity.kind.trim());
    const id = storableText(entity.id.trim());
    if (!kind || !id) throw new InvalidArgumentError("match.entities: every entity needs a kind and an id");
    if (kind.length > MAINTENANCE_LIMITS.entityPartCharacters || id.length > MAINTENANCE_LIMITS.entityPartCharacters) {
      throw new InvalidArgumentError(`match.entities: kind and id must be at most ${MAINTENANCE_LIMITS.entityPartCharacters} characters`);
    }
    if (!entities.some((e) => e.kind === kind && e.id === id)) entities.push({ kind, id });
  }
  return { startsAt, endsAt, reason, sources, entities };
}
