/**
 * `compile`, with its results kept by the expression's text (at most `max`, the oldest dropped
 * first): reading an organization's settings again compiles only an expression that changed. A
 * compiled expression holds no state of its own, so one serves every organization that wrote the
 * same text.
 */
export function compiledByText<T>(compile: (text: string) => T, max = 1_000): (text: string) => T {
  const compiled = new Map<string, T>();
  return (text) => {
    let result = compiled.get(text);
    if (result === undefined) {
      result = compile(text);
      if (compiled.size >= max) compiled.delete(compiled.keys().next().value!);
      compiled.set(text, result);
    }
    return result;
  };
}
