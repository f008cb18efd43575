import { InvalidArgumentError } from "../runtime/errors.js";

/** The one outbound channel kind; `chatwebhook:<label>` names where the update is meant to go. */
export const CHANNEL_KIND = "chatwebhook";
const ACCEPTED = "chatwebhook or chatwebhook:<label>";
const LABEL_MAX = 80;

export interface Channel {
  /** As given, trimmed: chatwebhook or chatwebhook:<label>. */
  value: string;
  /** Shown on the timeline only: the webhook itself decides where the post lands. */
  label: string | undefined;
}

/**
 * Reads a draft's channel, `chatwebhook` or `chatwebhook:<label>`, into its value and label;
 * anything else is InvalidArgument naming the accepted forms.
 */
export function parseChannel(raw: string): Channel {
  const value = raw.trim();
  if (!value) throw new InvalidArgumentError(`channel required: use ${ACCEPTED}`);
  if (value === CHANNEL_KIND) return { value, label: undefined };
  if (value.startsWith(`${CHANNEL_KIND}:`)) {
    const label = value.slice(CHANNEL_KIND.length + 1).trim();
    if (!label) throw new InvalidArgumentError(`channel label is empty: use ${ACCEPTED}`);
    if ([...label].length > LABEL_MAX) throw new InvalidArgumentError(`channel label must be at most ${LABEL_MAX} characters`);
    // Control characters have no place in a label shown on the timeline.
    if (/\p{Cc}/u.test(label)) throw new InvalidArgumentError("channel label must not contain control characters");
    return { value: `${CHANNEL_KIND}:${label}`, label };
  }
  const shown = [...value]
    .slice(0, 40)
    .join("")
    .replace(/\p{Cc}/gu, "?");
  throw new InvalidArgumentError(`channel "${shown}" is not accepted: use ${ACCEPTED} (the chat-webhook connection is the only outbound channel)`);
}
