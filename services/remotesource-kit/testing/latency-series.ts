import type { MetricsRangeCall, ReadResult } from "../index.js";

/**
 * Test-only: a metrics/range answer of two latency series in ms over the call's window, about 30
 * points each (one a minute at least), in a saw-tooth so a chart has something to draw.
 */
export function latencySeries(call: MetricsRangeCall): ReadResult {
  const step = Math.max(60_000, Math.floor((call.toMs - call.fromMs) / 30));
  const count = Math.floor((call.toMs - call.fromMs) / step) + 1;
  const points = (shift: number) => Array.from({ length: count }, (_, i) => ({ t: call.fromMs + i * step, v: 100 + shift + ((i * 37) % 50) }));
  return {
    raw: { expr: call.expr },
    series: [
      { label: 'latency_ms{instance="api-1"}', unit: "ms", points: points(0) },
      { label: 'latency_ms{instance="api-2"}', unit: "ms", points: points(40) },
    ],
  };
}
