import type { CustomSourceAuthOptions, CustomSourceRule } from "../../../gen/warroom/intake/v1/custom_sources_pb.js";

export type RuleInit = Partial<Omit<CustomSourceRule, "$typeName">>;
export type AuthInit = Partial<Omit<CustomSourceAuthOptions, "$typeName" | "signature">> & {
  signature?: { header: string; algorithm?: string; prefix?: string; encoding?: string };
};

/**
 * The rules of each vendor preset, built from the vendor's documented payload (see
 * test/fixtures/SOURCES.md for each shape and where it comes from).
 */
export const VENDOR_PRESETS: { name: string; description: string; rules: RuleInit[]; auth?: AuthInit }[] = [
  {
    name: "zabbix",
    description:
      "Zabbix webhook media type whose script posts its parameters as JSON: event_id ({EVENT.ID}), event_value ({EVENT.VALUE}), event_severity ({EVENT.SEVERITY}), event_name ({EVENT.NAME}), event_opdata ({EVENT.OPDATA}), event_update_status ({EVENT.UPDATE.STATUS}), event_recovery_id ({EVENT.RECOVERY.ID}), host_name ({HOST.NAME}), trigger_id ({TRIGGER.ID}), alert_subject ({ALERT.SUBJECT}), zabbix_url.",
    rules: [
      { name: "resolved", when: "body.event_value == '0'", kind: "'recovery'", attachKey: "body.event_id", eventId: "'recovery:' + body.event_recovery_id" },
      {
        name: "problem",
        when: "body.event_value == '1'",
        title: "body.event_name",
        severity:
          "body.event_severity == 'Disaster' ? 'sev1' : body.event_severity == 'High' ? 'sev2' : body.event_severity in ['Average', 'Warning'] ? 'sev3' : 'sev4'",
        attachKey: "body.event_id",
        // An update (acknowledgement, comment) of the same problem is a repeat, each one recorded.
        eventId: "body.event_update_status == '1' ? null : 'problem:' + body.event_id",
        entity: "{'kind': 'host', 'id': body.host_name}",
        summary: "has(body.event_opdata) && body.event_opdata != '' ? body.alert_subject + ': ' + body.event_opdata : body.alert_subject",
        link: "has(body.zabbix_url) ? body.zabbix_url + '/tr_events.php?triggerid=' + body.trigger_id + '&eventid=' + body.event_id : null",
      },
    ],
  },
  {
    name: "uptime-kuma",
    description:
      "Uptime Kuma's Webhook notification (body: application/json): heartbeat.status 0 down, 1 up, 2 pending, 3 maintenance; TLS certificate-expiry warnings open an incident per monitor; the Test button's body is dropped.",
    rules: [
      // A TLS certificate-expiry warning, sent like the Test button's body (no heartbeat, no
      // monitor) at 21, 14 and 7 days: "[<monitor>][<url>] ... will (be) expire(d) in N days".
      {
        name: "certificate expiry",
        when: "body.heartbeat == null && type(body.msg) == string && body.msg.startsWith('[') && body.msg.indexOf(']') > 1 && body.msg.matches('(?i)certificate.* will (be )?expired? in ')",
        title: "body.msg.substring(1, body.msg.indexOf(']')) + ': TLS certificate expires in ' + body.msg.split(' in ')[size(body.msg.split(' in ')) - 1]",
        severity: "'sev3'",
        attachKey: "'certificate:' + body.msg.substring(1, body.msg.indexOf(']'))",
        eventId: "'certificate:' + body.msg",
        entity: "{'kind': 'monitor', 'id': body.msg.substring(1, body.msg.indexOf(']'))}",
        summary: "body.msg",
      },
      { name: "test", when: "body.heartbeat == null", kind: "'ignore'", ignoreReason: "'Uptime Kuma test notification'" },
      {
        name: "up",
        when: "body.heartbeat.status == 1",
        kind: "'recovery'",
        attachKey: "'monitor:' + string(int(body.monitor.id))",
        eventId: "'up:' + string(int(body.monitor.id)) + ':' + body.heartbeat.time",
      },
      {
        name: "down",
        when: "body.heartbeat.status == 0",
        title: "body.monitor.name + ' is down'",
        severity: "'sev2'",
        attachKey: "'monitor:' + string(int(body.monitor.id))",
        eventId: "'down:' + string(int(body.monitor.id)) + ':' + body.heartbeat.time",
        entity: "{'kind': 'monitor', 'id': body.monitor.name}",
        summary: "body.heartbeat.msg",
        link: "has(body.monitor.url) && type(body.monitor.url) == string && body.monitor.url.startsWith('http') ? body.monitor.url : null",
      },
      {
        name: "pending or maintenance",
        when: "body.heartbeat.status in [2, 3]",
        kind: "'ignore'",
        ignoreReason: "body.heartbeat.status == 2 ? 'pending: Uptime Kuma retries before it reports down' : 'monitor in maintenance'",
      },
    ],
  },
  {
    name: "checkmk",
    description:
      "Checkmk notification script posting its NOTIFY_* context as JSON (NOTIFY_WHAT, NOTIFY_NOTIFICATIONTYPE, NOTIFY_HOSTNAME, NOTIFY_SERVICEDESC, NOTIFY_SERVICESTATE, NOTIFY_HOSTSTATE, NOTIFY_SERVICEOUTPUT, NOTIFY_HOSTOUTPUT, NOTIFY_SERVICEPROBLEMID, NOTIFY_HOSTPROBLEMID, NOTIFY_OMD_SITE).",
    rules: [
      {
        name: "recovery",
        when: "body.NOTIFY_NOTIFICATIONTYPE == 'RECOVERY'",
        kind: "'recovery'",
        attachKey: "body.NOTIFY_OMD_SITE + '/' + body.NOTIFY_HOSTNAME + (body.NOTIFY_WHAT == 'SERVICE' ? '/' + body.NOTIFY_SERVICEDESC : '')",
        eventId: "'recovery:' + body.NOTIFY_OMD_SITE + ':' + (body.NOTIFY_WHAT == 'SERVICE' ? body.NOTIFY_SERVICEPROBLEMID : body.NOTIFY_HOSTPROBLEMID)",
      },
      {
        name: "problem",
        when: "body.NOTIFY_NOTIFICATIONTYPE == 'PROBLEM'",
        title: "body.NOTIFY_WHAT == 'SERVICE' ? body.NOTIFY_HOSTNAME + ': ' + body.NOTIFY_SERVICEDESC : body.NOTIFY_HOSTNAME + ' is ' + body.NOTIFY_HOSTSTATE",
        severity: "(body.NOTIFY_WHAT == 'SERVICE' ? body.NOTIFY_SERVICESTATE : body.NOTIFY_HOSTSTATE) in ['CRIT', 'DOWN'] ? 'sev2' : 'sev3'",
        attachKey: "body.NOTIFY_OMD_SITE + '/' + body.NOTIFY_HOSTNAME + (body.NOTIFY_WHAT == 'SERVICE' ? '/' + body.NOTIFY_SERVICEDESC : '')",
        entity: "{'kind': 'host', 'id': body.NOTIFY_HOSTNAME}",
        summary: "body.NOTIFY_WHAT == 'SERVICE' ? body.NOTIFY_SERVICEOUTPUT : body.NOTIFY_HOSTOUTPUT",
      },
      {
        name: "other notifications",
        when: "has(body.NOTIFY_NOTIFICATIONTYPE) && has(body.NOTIFY_HOSTNAME)",
        kind: "'ignore'",
        ignoreReason: "'Checkmk ' + body.NOTIFY_NOTIFICATIONTYPE + ' notification'",
      },
    ],
  },
  {
    name: "nagios",
    description:
      "Nagios Core or Icinga notification command posting its macros as JSON or form fields: NOTIFICATIONTYPE, HOSTNAME, HOSTSTATE, HOSTOUTPUT, SERVICEDESC, SERVICESTATE, SERVICEOUTPUT, HOSTPROBLEMID, SERVICEPROBLEMID.",
    rules: [
      {
        name: "recovery",
        when: "body.NOTIFICATIONTYPE == 'RECOVERY'",
        kind: "'recovery'",
        attachKey: "body.HOSTNAME + (has(body.SERVICEDESC) && body.SERVICEDESC != '' ? '/' + body.SERVICEDESC : '')",
        eventId: "'recovery:' + (has(body.SERVICEDESC) && body.SERVICEDESC != '' ? body.SERVICEPROBLEMID : body.HOSTPROBLEMID)",
      },
      {
        name: "problem",
        when: "body.NOTIFICATIONTYPE == 'PROBLEM'",
        title:
          "has(body.SERVICEDESC) && body.SERVICEDESC != '' ? body.HOSTNAME + ': ' + body.SERVICEDESC + ' is ' + body.SERVICESTATE : body.HOSTNAME + ' is ' + body.HOSTSTATE",
        severity: "(has(body.SERVICEDESC) && body.SERVICEDESC != '' ? body.SERVICESTATE : body.HOSTSTATE) in ['CRITICAL', 'DOWN'] ? 'sev2' : 'sev3'",
        attachKey: "body.HOSTNAME + (has(body.SERVICEDESC) && body.SERVICEDESC != '' ? '/' + body.SERVICEDESC : '')",
        entity: "body.HOSTNAME != '' ? {'kind': 'host', 'id': body.HOSTNAME} : null",
        summary: "has(body.SERVICEDESC) && body.SERVICEDESC != '' ? body.SERVICEOUTPUT : body.HOSTOUTPUT",
      },
      {
        name: "other notifications",
        when: "has(body.NOTIFICATIONTYPE) && has(body.HOSTNAME)",
        kind: "'ignore'",
        ignoreReason: "'Nagios ' + body.NOTIFICATIONTYPE + ' notification'",
      },
    ],
  },
  {
    name: "newrelic",
    description:
      "New Relic workflow with a Webhook destination and its default payload template (id, issueUrl, title, priority, impactedEntities, state, trigger, updatedAt, alertConditionNames, ...).",
    rules: [
      { name: "closed", when: "body.state == 'CLOSED'", kind: "'recovery'", attachKey: "body.id", eventId: "'closed:' + body.id" },
      {
        name: "open",
        when: "body.state in ['CREATED', 'ACTIVATED']",
        title: "body.title",
        severity: "body.priority == 'CRITICAL' ? 'sev1' : body.priority == 'HIGH' ? 'sev2' : body.priority == 'LOW' ? 'sev4' : 'sev3'",
        attachKey: "body.id",
        eventId: "body.id + ':' + string(int(body.updatedAt))",
        entity: "has(body.impactedEntities) && size(body.impactedEntities) > 0 ? {'kind': 'entity', 'id': string(body.impactedEntities[0])} : null",
        summary: "has(body.alertConditionNames) ? 'Conditions: ' + body.alertConditionNames.join(', ') : null",
        link: "body.issueUrl",
      },
      { name: "acknowledged", when: "body.state == 'ACKNOWLEDGED'", kind: "'ignore'", ignoreReason: "'acknowledged in New Relic'" },
    ],
  },
  {
    name: "elastic",
    description:
      'Kibana (Elastic) rule actions through a Webhook connector, on the active and the recovered action groups, with the body {"rule": {"id": "{{rule.id}}", "name": "{{rule.name}}", "tags": "{{rule.tags}}", "url": "{{rule.url}}"}, "alert": {"id": "{{alert.id}}", "uuid": "{{alert.uuid}}", "actionGroup": "{{alert.actionGroup}}"}, "context": {"reason": "{{context.reason}}", "message": "{{context.message}}"}, "date": "{{date}}"}.',
    rules: [
      {
        name: "recovered",
        when: "body.alert.actionGroup == 'recovered'",
        kind: "'recovery'",
        attachKey: "body.rule.id + '/' + body.alert.id",
        eventId: "'recovered:' + body.alert.uuid",
      },
      {
        name: "active",
        when: "has(body.alert.actionGroup)",
        title: "body.rule.name",
        severity: "has(body.rule.tags) && body.rule.tags.contains('critical') ? 'sev1' : 'sev3'",
        attachKey: "body.rule.id + '/' + body.alert.id",
        eventId: "body.alert.uuid + ':' + body.date",
        entity: "{'kind': 'alert', 'id': body.alert.id}",
        summary: "has(body.context.reason) && body.context.reason != '' ? body.context.reason : body.context.message",
        link: "has(body.rule.url) ? body.rule.url : null",
      },
    ],
  },
  {
    name: "uptimerobot",
    description:
      'UptimeRobot Webhook alert contact, POST value (JSON): {"monitorID": "*monitorID*", "monitorURL": "*monitorURL*", "monitorFriendlyName": "*monitorFriendlyName*", "alertType": "*alertType*", "alertTypeFriendlyName": "*alertTypeFriendlyName*", "alertDetails": "*alertDetails*", "alertDuration": "*alertDuration*", "alertDateTime": "*alertDateTime*", "sslExpiryDaysLeft": "*sslExpiryDaysLeft*"}.',
    rules: [
      {
        name: "up",
        when: "string(body.alertType) == '2'",
        kind: "'recovery'",
        attachKey: "'monitor:' + string(body.monitorID)",
        eventId: "'up:' + string(body.monitorID) + ':' + string(body.alertDateTime)",
      },
      {
        name: "down",
        when: "string(body.alertType) == '1'",
        title: "body.monitorFriendlyName + ' is down'",
        severity: "'sev2'",
        attachKey: "'monitor:' + string(body.monitorID)",
        eventId: "'down:' + string(body.monitorID) + ':' + string(body.alertDateTime)",
        entity: "{'kind': 'monitor', 'id': body.monitorFriendlyName}",
        summary: "body.alertDetails",
        link: "body.monitorURL.startsWith('http') ? body.monitorURL : null",
      },
      {
        name: "ssl expiry",
        when: "string(body.alertType) == '3'",
        title: "'SSL certificate of ' + body.monitorFriendlyName + ' expires in ' + string(body.sslExpiryDaysLeft) + ' days'",
        severity: "'sev3'",
        attachKey: "'ssl:' + string(body.monitorID)",
        eventId: "'ssl:' + string(body.monitorID) + ':' + string(body.alertDateTime)",
        entity: "{'kind': 'monitor', 'id': body.monitorFriendlyName}",
      },
    ],
  },
  {
    name: "grafana",
    description:
      "Grafana Alerting's Webhook contact point (status, alerts, groupKey, commonLabels, commonAnnotations); the contact point's Test button is dropped as a test.",
    rules: [
      {
        // The contact point's Test button: Grafana's built-in test alert, a check of the wiring.
        name: "test",
        when: "size(body.alerts) > 0 && body.alerts.all(a, has(a.labels.alertname) && a.labels.alertname == 'TestAlert' && has(a.labels.instance) && a.labels.instance == 'Grafana' && has(a.annotations.summary) && a.annotations.summary == 'Notification test')",
        kind: "'ignore'",
        ignoreReason: "'Grafana contact-point test notification'",
      },
      {
        name: "resolved",
        when: "body.status == 'resolved'",
        kind: "'recovery'",
        attachKey: "body.groupKey",
        eventId: "'resolved:' + body.groupKey + ':' + body.alerts.map(a, a.fingerprint + '@' + a.endsAt).join(',')",
      },
      {
        name: "firing",
        when: "body.status == 'firing' && size(body.alerts) > 0",
        title: "has(body.commonLabels.alertname) ? body.commonLabels.alertname : body.title",
        severity:
          "!has(body.commonLabels.severity) ? 'sev3' : body.commonLabels.severity in ['critical', 'page'] ? 'sev1' : body.commonLabels.severity in ['high', 'error'] ? 'sev2' : body.commonLabels.severity in ['info', 'low'] ? 'sev4' : 'sev3'",
        // Every firing notification of a group is a repeat on its incident, as for Alertmanager.
        attachKey: "body.groupKey",
        entity: "has(body.commonLabels.service) ? {'kind': 'service', 'id': body.commonLabels.service} : null",
        summary: "has(body.commonAnnotations.summary) ? body.commonAnnotations.summary : null",
        link: "has(body.alerts[0].generatorURL) ? body.alerts[0].generatorURL : null",
        runbookUrl: "has(body.commonAnnotations.runbook_url) ? body.commonAnnotations.runbook_url : null",
      },
    ],
  },
  {
    name: "github",
    description:
      "GitHub repository or organization webhook (content type application/json, a secret set) for the workflow_run event: a failed run opens an incident per repository, workflow and branch, a successful run recovers it; checks X-Hub-Signature-256.",
    auth: { signature: { header: "x-hub-signature-256", algorithm: "sha256", prefix: "sha256=", encoding: "hex" } },
    rules: [
      { name: "ping", when: "has(body.zen) && has(body.hook_id)", kind: "'ignore'", ignoreReason: "'GitHub webhook ping'" },
      {
        name: "not finished",
        when: "has(body.workflow_run) && body.action != 'completed'",
        kind: "'ignore'",
        ignoreReason: "'workflow run ' + body.action",
      },
      {
        name: "succeeded",
        when: "has(body.workflow_run) && body.workflow_run.conclusion == 'success'",
        kind: "'recovery'",
        attachKey: "body.repository.full_name + '/' + string(int(body.workflow_run.workflow_id)) + '@' + body.workflow_run.head_branch",
        eventId: "'run:' + string(int(body.workflow_run.id)) + ':' + string(int(body.workflow_run.run_attempt))",
      },
      {
        name: "failed",
        when: "has(body.workflow_run) && body.workflow_run.conclusion in ['failure', 'timed_out', 'startup_failure']",
        title: "body.workflow_run.name + ' failed on ' + body.repository.full_name + '@' + body.workflow_run.head_branch",
        severity: "body.workflow_run.head_branch == body.repository.default_branch ? 'sev2' : 'sev3'",
        attachKey: "body.repository.full_name + '/' + string(int(body.workflow_run.workflow_id)) + '@' + body.workflow_run.head_branch",
        eventId: "'run:' + string(int(body.workflow_run.id)) + ':' + string(int(body.workflow_run.run_attempt))",
        entity: "{'kind': 'repository', 'id': body.repository.full_name}",
        summary:
          "'Run #' + string(int(body.workflow_run.run_number)) + ' (' + body.workflow_run.event + ', ' + body.workflow_run.head_sha.substring(0, 7) + '): ' + body.workflow_run.conclusion",
        link: "body.workflow_run.html_url",
      },
      {
        name: "other conclusions",
        when: "has(body.workflow_run)",
        kind: "'ignore'",
        ignoreReason: "'workflow run ' + string(body.workflow_run.conclusion)",
      },
    ],
  },
  {
    name: "gitlab",
    description:
      "GitLab project webhook for pipeline events: a failed pipeline opens an incident per project and ref, a successful one recovers it; checks the secret token in X-Gitlab-Token.",
    auth: { secretHeader: "x-gitlab-token" },
    rules: [
      {
        name: "succeeded",
        when: "body.object_kind == 'pipeline' && body.object_attributes.status == 'success'",
        kind: "'recovery'",
        attachKey: "body.project.path_with_namespace + '@' + body.object_attributes.ref",
        eventId: "'pipeline:' + string(int(body.object_attributes.id)) + ':success'",
      },
      {
        name: "failed",
        when: "body.object_kind == 'pipeline' && body.object_attributes.status == 'failed'",
        title: "'Pipeline failed on ' + body.project.path_with_namespace + '@' + body.object_attributes.ref",
        severity: "body.object_attributes.ref == body.project.default_branch ? 'sev2' : 'sev3'",
        attachKey: "body.project.path_with_namespace + '@' + body.object_attributes.ref",
        eventId: "'pipeline:' + string(int(body.object_attributes.id)) + ':failed'",
        entity: "{'kind': 'repository', 'id': body.project.path_with_namespace}",
        summary:
          "'Pipeline #' + string(int(body.object_attributes.id)) + ' (' + body.object_attributes.source + ', ' + body.object_attributes.sha.substring(0, 8) + ') failed' + (has(body.commit.title) ? ': ' + body.commit.title : '')",
        link: "has(body.object_attributes.url) ? body.object_attributes.url : body.project.web_url + '/-/pipelines/' + string(int(body.object_attributes.id))",
      },
      {
        name: "other pipeline states",
        when: "body.object_kind == 'pipeline'",
        kind: "'ignore'",
        ignoreReason: "'pipeline ' + body.object_attributes.status",
      },
    ],
  },
  {
    name: "jenkins",
    description:
      "Jenkins Notification plugin (format JSON, protocol HTTP): a build that ends FAILURE or UNSTABLE opens an incident per job, SUCCESS recovers it, STARTED is dropped. The plugin sets only a URL, so the secret goes in its path.",
    auth: { secretInPath: true },
    rules: [
      {
        name: "started",
        when: "has(body.build.phase) && body.build.phase in ['QUEUED', 'STARTED']",
        kind: "'ignore'",
        ignoreReason: "'build ' + body.build.phase.lowerAscii()",
      },
      {
        name: "succeeded",
        when: "has(body.build.status) && body.build.status == 'SUCCESS'",
        kind: "'recovery'",
        attachKey: "body.name",
        // COMPLETED and FINALIZED of one build are one notification.
        eventId: "body.name + '#' + string(int(body.build.number)) + ':SUCCESS'",
      },
      {
        name: "failed",
        when: "has(body.build.status) && body.build.status in ['FAILURE', 'UNSTABLE']",
        title: "body.name + ' build ' + (body.build.status == 'FAILURE' ? 'failed' : 'is unstable')",
        severity: "body.build.status == 'FAILURE' ? 'sev2' : 'sev3'",
        attachKey: "body.name",
        eventId: "body.name + '#' + string(int(body.build.number)) + ':' + body.build.status",
        entity: "{'kind': 'job', 'id': body.name}",
        summary: "'Build #' + string(int(body.build.number)) + ' ' + body.build.status + (has(body.build.scm.branch) ? ' on ' + body.build.scm.branch : '')",
        link: "has(body.build.full_url) ? body.build.full_url : null",
      },
      {
        name: "aborted",
        when: "has(body.build.status) && body.build.status in ['ABORTED', 'NOT_BUILT']",
        kind: "'ignore'",
        ignoreReason: "'build ' + body.build.status.lowerAscii()",
      },
    ],
  },
];
