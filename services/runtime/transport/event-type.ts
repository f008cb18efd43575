import type { DescMessage } from "@bufbuild/protobuf";

/** One kind of domain event: the subject it travels on, paired with the message it carries. */
export interface EventType<Desc extends DescMessage = DescMessage> {
  /** `events.<name>`, the JetStream subject. */
  readonly subject: string;
  /** The name clients see, e.g. as the `event:` of the console's live stream. */
  readonly name: string;
  readonly schema: Desc;
}

export function eventType<Desc extends DescMessage>(name: string, schema: Desc): EventType<Desc> {
  return { subject: `events.${name}`, name, schema };
}
