// Loaded with `node --import` to give one process a clock that is CLOCK_SKEW_MS off: Date and
// Date.now() lie, as on a host whose clock drifted. Only tests use it.
const skew = Number(process.env.CLOCK_SKEW_MS ?? 0);
const RealDate = Date;
class SkewedDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(RealDate.now() + skew);
    else super(...args);
  }
  static now() {
    return RealDate.now() + skew;
  }
}
globalThis.Date = SkewedDate;
