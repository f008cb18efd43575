import { api, orgPath } from "../../api";
import { askConfirm, ErrorNotice, useAction, useLoad } from "../../ui";

export function EgressSwitch() {
  const egress = useLoad(() => api<{ enabled: boolean }>("GET", orgPath("/oncall/egress")), []);
  const action = useAction();
  const enabled = egress.data?.enabled ?? false;

  async function toggle(next: boolean) {
    if (
      next &&
      !(await askConfirm({
        title: "Switch real egress on?",
        message: "From now on every approved update you send is posted to the real chat channel.",
        confirmLabel: "Switch on",
      }))
    )
      return;
    await action.run(async () => {
      await api("PUT", orgPath("/oncall/egress"), { enabled: next });
      egress.reload();
    });
  }

  return (
    <section aria-labelledby="egress-heading" class="card">
      <h2 id="egress-heading">Real egress</h2>
      <p class="notice notice-warning" id="egress-warning">
        <strong>Warning:</strong> while real egress is on, every approved update that is sent is posted to the real chat channel, for everyone in it to read; a
        post cannot be edited or taken back. While it is off (the default), sent updates are recorded in the room as simulated and delivered nowhere. Test
        connection posts in both cases.
      </p>
      <div class="switch-row">
        <input
          id="egress-switch"
          type="checkbox"
          role="switch"
          checked={enabled}
          aria-checked={enabled}
          disabled={egress.loading || action.busy}
          aria-describedby="egress-warning"
          onChange={(e) => toggle(e.currentTarget.checked)}
        />
        <label for="egress-switch">{enabled ? "Real egress is on" : "Real egress is off"}</label>
      </div>
      <ErrorNotice error={action.error || egress.error} />
    </section>
  );
}
