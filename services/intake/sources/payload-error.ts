/**
 * The only error the source mappings throw. A recognized body that cannot be mapped says which
 * field is wrong, so the endpoint can answer 422 with a message the sender can act on.
 */
export class PayloadError extends Error {
  override readonly name = "PayloadError";

  constructor(
    /** The offending field, as the sender spells it (e.g. `severity`, `entityHints[2]`). */
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}
