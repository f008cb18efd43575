// Ready-to-paste configuration for each sender, as plain text. The base address is the one the
// console is served from, which is the address people and monitors reach the service at. Kept free
// of the DOM so the service's tests check the snippets with the senders' own tools.

/** The metrics monitor's webhook payload template, with its template variables. */
export function datadogPayload(): string {
  return JSON.stringify(
    {
      title: "$EVENT_TITLE",
      body: "$EVENT_MSG",
      alert_id: "$ALERT_ID",
      event_id: "$ID",
      alert_type: "$ALERT_TYPE",
      alert_transition: "$ALERT_TRANSITION",
      alert_priority: "$ALERT_PRIORITY",
      alert_scope: "$ALERT_SCOPE",
      tags: ["service:$TAGS[service]", "env:$TAGS[env]"],
      link: "$LINK",
      date: "$DATE",
    },
    null,
    2,
  );
}

/** An Alertmanager receiver posting to this service, up to its credential's lines. */
function alertmanagerReceiver(origin: string): string[] {
  return [
    "receivers:",
    "  - name: warroom",
    "    webhook_configs:",
    `      - url: ${origin}/triggers/alertrouter`,
    "        send_resolved: true",
    "        http_config:",
  ];
}

/**
 * An Alertmanager receiver that posts to this service with the alert-router secret as a custom
 * header: `http_headers` exists from Alertmanager 0.28.0 on.
 */
export function alertmanagerHeadersBlock(origin: string, secret: string): string {
  return [
    ...alertmanagerReceiver(origin),
    "          http_headers:",
    "            X-Service-Alertrouter-Secret:",
    "              secrets:",
    `                - ${secret}`,
  ].join("\n");
}

/**
 * The same receiver for every Alertmanager version (Debian 12 ships 0.25, which refuses
 * `http_headers`): the secret travels as `Authorization: Bearer`.
 */
export function alertmanagerAuthorizationBlock(origin: string, secret: string): string {
  return [...alertmanagerReceiver(origin), "          authorization:", `            credentials: "${secret}"`].join("\n");
}

/** The curl command that pings a heartbeat with the ingest token. */
export function heartbeatCurl(origin: string, org: string, token: string, name = "<heartbeat-name>"): string {
  return `curl -fsS -X POST -H "Authorization: Bearer ${token}" \\\n  ${origin}/o/${org}/heartbeats/${name}/ping`;
}

/** The call a chat workflow makes to open an incident from a message. */
export function chatCurl(origin: string, org: string, secret: string): string {
  return [
    `curl -fsS -X POST ${origin}/triggers/chat/${org} \\`,
    `  -H "x-service-chat-secret: ${secret}" \\`,
    `  -H "content-type: application/json" \\`,
    `  -d '{"channel_id": "C012AB3CD", "message_id": "1718186712.000100", "author": "alice", "text": "checkout is down"}'`,
  ].join("\n");
}
