import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";

// A few client routes need no router library: the History API, a listener set, and links that
// navigate without a page load (a modified click still opens a new tab).

const listeners = new Set<() => void>();
let navigatedOnce = false;

/**
 * Goes to `to` without a page load (replacing the history entry when asked) and tells every
 * listener.
 */
export function navigate(to: string, options: { replace?: boolean } = {}): void {
  if (options.replace) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  navigatedOnce = true;
  for (const listener of listeners) listener();
}

/** True after the first in-app navigation: then a new page moves focus to its heading. */
export function hasNavigated(): boolean {
  return navigatedOnce;
}

window.addEventListener("popstate", () => {
  navigatedOnce = true;
  for (const listener of listeners) listener();
});

export interface Location {
  path: string;
  query: URLSearchParams;
}

function current(): Location {
  return { path: location.pathname, query: new URLSearchParams(location.search) };
}

/** The current path and query, kept current while the component is mounted. */
export function useLocation(): Location {
  const [loc, setLoc] = useState(current);
  useEffect(() => {
    const update = () => setLoc(current());
    listeners.add(update);
    return () => {
      listeners.delete(update);
    };
  }, []);
  return loc;
}

/**
 * A link that navigates within the console without a page load; a modified click still opens a new
 * tab.
 */
export function Link(props: { href: string; children: ComponentChildren; class?: string; "aria-current"?: "page" | undefined; "aria-label"?: string }) {
  const { href, children, ...rest } = props;
  return (
    <a
      {...rest}
      href={href}
      onClick={(event) => {
        if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
        event.preventDefault();
        navigate(href);
      }}
    >
      {children}
    </a>
  );
}
