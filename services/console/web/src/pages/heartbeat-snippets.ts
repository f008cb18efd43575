import type { Heartbeat } from "../api";

/**
 * Copy-paste setups for a heartbeat, generated from its own settings and its own ping URL (the key
 * in the URL is the credential, as in Healthchecks: no header, no token in the job's environment).
 * Each command is one line, so it can be pasted as it is into a crontab, a unit or a container.
 */

/** Where the job's command goes; the person replaces it with theirs. */
export const JOB_PLACEHOLDER = "/usr/local/bin/your-job";

/** The last 10 KiB of output are what the service keeps; a body over 1 MiB is refused. */
const KEPT_BYTES = 10240;

const CURL = "curl -fsS -m 10 --retry 5 -o /dev/null";

/**
 * The crontab schedule that runs a job as often as the heartbeat expects: its own cron schedule,
 * or an interval cron can express (a whole number of minutes dividing the hour, of hours dividing
 * the day, a day or a week); undefined for an interval cron cannot keep.
 */
export function cronOf(heartbeat: Pick<Heartbeat, "schedule" | "expectedIntervalSeconds">): string | undefined {
  if (heartbeat.schedule) return heartbeat.schedule;
  const every = heartbeat.expectedIntervalSeconds;
  if (every <= 0 || every % 60 !== 0) return undefined;
  const minutes = every / 60;
  if (minutes === 1) return "* * * * *";
  if (minutes < 60) return 60 % minutes === 0 ? `*/${minutes} * * * *` : undefined;
  if (minutes % 60 !== 0) return undefined;
  const hours = minutes / 60;
  if (hours === 1) return "0 * * * *";
  if (hours < 24) return 24 % hours === 0 ? `0 */${hours} * * *` : undefined;
  if (hours === 24) return "0 0 * * *";
  if (hours === 168) return "0 0 * * 0";
  return undefined;
}

/**
 * The job between a start and its exit status, with the last 10 KiB of its output, paired by a
 * run id: a POSIX sh command on one line (no `%`, which a crontab would turn into a newline).
 */
export function runCommand(pingUrl: string, job = JOB_PLACEHOLDER): string {
  return [
    "RID=$(cat /proc/sys/kernel/random/uuid)",
    "L=$(mktemp)",
    `${CURL} "${pingUrl}/start?rid=$RID"`,
    `${job} > "$L" 2>&1`,
    "S=$?",
    `tail -c ${KEPT_BYTES} "$L" | ${CURL} --data-binary @- "${pingUrl}/$S?rid=$RID"`,
    'rm -f "$L"',
    "exit $S",
  ].join("; ");
}

/** A CronJob's name: lowercase letters, digits and '-', at most 52 characters. */
function cronJobName(name: string): string {
  return name.replace(/[._]/g, "-").slice(0, 52).replace(/-+$/, "") || "heartbeat";
}

export interface HeartbeatSnippet {
  id: string;
  title: string;
  text: string;
}

/** The crontab line, the systemd lines and the Kubernetes CronJob for this heartbeat. */
export function heartbeatSnippets(heartbeat: Pick<Heartbeat, "name" | "schedule" | "timezone" | "expectedIntervalSeconds" | "pingUrl">): {
  snippets: HeartbeatSnippet[];
  notes: string[];
} {
  const url = heartbeat.pingUrl;
  const cron = cronOf(heartbeat);
  const snippets: HeartbeatSnippet[] = [];
  const notes: string[] = [];
  if (!url) {
    notes.push("This heartbeat has no ping URL yet: rotate its ping key to give it one.");
    return { snippets, notes };
  }
  snippets.push({ id: `snippet-ping-${heartbeat.name}`, title: "Ping (at the end of the job)", text: `${CURL} "${url}"` });
  const zone = heartbeat.schedule ? (heartbeat.timezone ?? "UTC") : undefined;
  if (cron) {
    snippets.push({
      id: `snippet-crontab-${heartbeat.name}`,
      title: "crontab line (start, exit status and output)",
      text: `${cron} ${runCommand(url)}`,
    });
    // cron reads a schedule in the machine's zone; cronie reads CRON_TZ, set on its own line.
    if (zone && zone !== "UTC") notes.push(`The schedule is read in ${zone}: on a machine in another zone, put CRON_TZ=${zone} on a line above it.`);
  } else {
    notes.push(
      `Every ${heartbeat.expectedIntervalSeconds} s has no crontab schedule: cron runs at whole minutes. Use the systemd lines with a timer (OnUnitActiveSec=${heartbeat.expectedIntervalSeconds}s), or give the heartbeat a cron schedule.`,
    );
  }
  snippets.push({
    id: `snippet-systemd-${heartbeat.name}`,
    title: "systemd: add to the job's [Service] section",
    text: [
      `ExecStartPre=-${CURL} "${url}/start"`,
      // $$ is a literal $ for systemd; the shell then reads the variables systemd sets after a run.
      `ExecStopPost=/bin/sh -c 'if [ "$$EXIT_CODE" = exited ]; then S=$$EXIT_STATUS; else S=fail; fi; journalctl -q _SYSTEMD_INVOCATION_ID=$$INVOCATION_ID -o cat 2>/dev/null | tail -c ${KEPT_BYTES} | ${CURL} --data-binary @- "${url}/$$S"'`,
    ].join("\n"),
  });
  if (cron) {
    snippets.push({
      id: `snippet-kubernetes-${heartbeat.name}`,
      title: "Kubernetes CronJob (an image with sh and curl)",
      text: [
        "apiVersion: batch/v1",
        "kind: CronJob",
        `metadata: {name: ${cronJobName(heartbeat.name)}}`,
        "spec:",
        `  schedule: "${cron}"`,
        ...(zone ? [`  timeZone: "${zone}"`] : []),
        "  concurrencyPolicy: Forbid",
        "  jobTemplate:",
        "    spec:",
        "      backoffLimit: 0",
        "      template:",
        "        spec:",
        "          restartPolicy: Never",
        "          containers:",
        "            - name: job",
        "              image: your-registry/your-job:1.0",
        `              command: ["/bin/sh", "-c"]`,
        `              args: [${JSON.stringify(runCommand(url))}]`,
      ].join("\n"),
    });
  }
  return { snippets, notes };
}
