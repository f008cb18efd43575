import { createHash, type Hash } from "node:crypto";
import { open, type FileHandle } from "node:fs/promises";

/**
 * The embedded database's backup file: one file, written as a stream, read back in two passes (the
 * first checks it whole before the second restores it).
 *
 *   header   "warroom-backup\n" then the format version as one byte
 *   records  a tag byte, then:
 *            K  u32 length, the secrets key file of DATA_DIR (absent when SECRETS_KEYS was used)
 *            T  u16 length, "schema.table": the table's rows follow
 *            D  u32 length, bytes of the table's COPY text (at most CHUNK_BYTES)
 *            E  the table's rows end
 *            M  u32 length, the manifest as JSON: the last record
 *   trailer  "\nend of warroom backup\n"
 *
 * The manifest's sha256 covers every byte before its M tag; a file cut short has no trailer.
 */

export const FORMAT_VERSION = 1;
const MAGIC = Buffer.from("warroom-backup\n");
const TRAILER = Buffer.from("\nend of warroom backup\n");
/** The most a D record holds: rows are gathered up to this, so memory stays bounded. */
export const CHUNK_BYTES = 256 * 1024;

export interface BackupTable {
  /** "schema.table" */
  name: string;
  /** The columns copied, in order (generated columns are left out: Postgres computes them). */
  columns: string[];
  rows: number;
}

export interface Manifest {
  format: number;
  createdAt: string;
  /** The server's version, e.g. "18.1". */
  postgresVersion: string;
  /** Each service's schema and the last migration applied to it. */
  schemas: Record<string, number>;
  tables: BackupTable[];
  /** "schema.sequence" → its value, so restored rows never meet an id handed out again. */
  sequences: Record<string, { lastValue: string; isCalled: boolean }>;
  /** Whether the file carries the key file of DATA_DIR (secrets.key). */
  secretsKeyFile: boolean;
  /** Bytes of COPY text over all tables. */
  dataBytes: number;
  /** SHA-256 (hex) of every byte before the manifest. */
  sha256: string;
}

export class BackupFileError extends Error {
  override name = "BackupFileError";
}

/** Writes the records to an open file, hashing them, with the file's own backpressure. */
export class BackupWriter {
  private readonly hash = createHash("sha256");
  private position = 0;
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  private constructor(private readonly file: FileHandle) {}

  static async create(path: string): Promise<BackupWriter> {
    // Owner-only from the first byte: the file holds the secrets key and every row.
    const file = await open(path, "wx", 0o600);
    const writer = new BackupWriter(file);
    await writer.raw(Buffer.concat([MAGIC, Buffer.from([FORMAT_VERSION])]));
    return writer;
  }

  private async raw(bytes: Buffer): Promise<void> {
    this.hash.update(bytes);
    await this.file.write(bytes, 0, bytes.length, this.position);
    this.position += bytes.length;
  }

  async secretsKey(content: Buffer): Promise<void> {
    await this.raw(Buffer.concat([Buffer.from("K"), u32(content.length), content]));
  }

  async beginTable(name: string): Promise<void> {
    const bytes = Buffer.from(name, "utf8");
    await this.raw(Buffer.concat([Buffer.from("T"), u16(bytes.length), bytes]));
  }

  /** Gathers COPY output and writes it as D records of up to CHUNK_BYTES. */
  async data(chunk: Buffer): Promise<void> {
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    if (this.pendingBytes >= CHUNK_BYTES) await this.flush();
  }

  private async flush(): Promise<void> {
    let all = Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    while (all.length > 0) {
      const part = all.subarray(0, CHUNK_BYTES);
      all = all.subarray(part.length);
      await this.raw(Buffer.concat([Buffer.from("D"), u32(part.length), part]));
    }
  }

  async endTable(): Promise<void> {
    await this.flush();
    await this.raw(Buffer.from("E"));
  }

  /** Writes the manifest (with the checksum of everything before it) and the trailer. */
  async finish(manifest: Omit<Manifest, "sha256">): Promise<Manifest> {
    const complete: Manifest = { ...manifest, sha256: this.hash.copy().digest("hex") };
    const json = Buffer.from(JSON.stringify(complete), "utf8");
    await this.raw(Buffer.concat([Buffer.from("M"), u32(json.length), json, TRAILER]));
    await this.file.sync();
    await this.file.close();
    return complete;
  }

  async abandon(): Promise<void> {
    await this.file.close().catch(() => {});
  }

  get bytesWritten(): number {
    return this.position;
  }
}

function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

/** What the reader hands the restore, record by record. */
export type BackupRecord =
  | { kind: "secrets-key"; content: Buffer }
  | { kind: "table"; name: string }
  | { kind: "data"; bytes: Buffer }
  | { kind: "end-table" }
  | { kind: "manifest"; manifest: Manifest };

/** Reads a backup file's records in order, from a buffer of at most a few chunks. */
class BackupReader {
  private buffer = Buffer.alloc(0);
  private filePosition = 0;
  private eof = false;
  readonly hash: Hash = createHash("sha256");
  /** Bytes handed out so far: where the reader is, for messages. */
  offset = 0;

  constructor(
    private readonly file: FileHandle,
    private readonly path: string,
  ) {}

  private async fill(n: number): Promise<void> {
    while (this.buffer.length < n && !this.eof) {
      const chunk = Buffer.alloc(Math.max(CHUNK_BYTES, n - this.buffer.length));
      const { bytesRead } = await this.file.read(chunk, 0, chunk.length, this.filePosition);
      if (bytesRead === 0) this.eof = true;
      this.filePosition += bytesRead;
      this.buffer = Buffer.concat([this.buffer, chunk.subarray(0, bytesRead)]);
    }
  }

  /** Exactly n bytes, or a "cut short" error naming where. */
  async take(n: number, what: string, hashed = true): Promise<Buffer> {
    await this.fill(n);
    if (this.buffer.length < n) {
      throw new BackupFileError(
        `${this.path} is cut short: it ends at byte ${this.offset + this.buffer.length} inside ${what}. The backup did not complete ` +
          "(interrupted, or the disk filled up): take a new one.",
      );
    }
    const out = Buffer.from(this.buffer.subarray(0, n));
    this.buffer = this.buffer.subarray(n);
    this.offset += n;
    if (hashed) this.hash.update(out);
    return out;
  }

  async atEnd(): Promise<boolean> {
    await this.fill(1);
    return this.buffer.length === 0;
  }
}

/**
 * Reads every record of a backup file in order, calling `onRecord` for each; checks the format,
 * the structure, the checksum and the row counts against the manifest, and returns the manifest.
 * Throws BackupFileError with what is wrong and what to do.
 */
export async function readBackup(path: string, onRecord: (record: BackupRecord) => Promise<void> | void = () => {}): Promise<Manifest> {
  let file: FileHandle;
  try {
    file = await open(path, "r");
  } catch (err) {
    throw new BackupFileError(`cannot open the backup ${path}: ${(err as Error).message}`);
  }
  try {
    const reader = new BackupReader(file, path);
    const damaged = (what: string) =>
      new BackupFileError(`${path} is damaged: ${what} (at byte ${reader.offset}). Restore from another backup, and check the disk that holds them.`);
    const head = await reader.take(MAGIC.length + 1, "the header").catch(() => Buffer.alloc(0));
    if (head.length === 0 || !head.subarray(0, MAGIC.length).equals(MAGIC)) {
      throw new BackupFileError(`${path} is not a warroom backup (made by \`npm run admin -- backup\`); a pg_dump file is restored with pg_restore`);
    }
    const format = head[MAGIC.length]!;
    if (format !== FORMAT_VERSION) {
      throw new BackupFileError(
        `${path} is in backup format ${format}, which this version does not read (it reads format ${FORMAT_VERSION}): restore it with a newer version`,
      );
    }
    const rowsSeen: Array<{ name: string; rows: number }> = [];
    let current: { name: string; rows: number } | undefined;
    for (;;) {
      const tag = String.fromCharCode((await reader.take(1, "the next record", false))[0]!);
      if (tag === "M") {
        const checksum = reader.hash.copy().digest("hex");
        const length = (await reader.take(4, "the manifest", false)).readUInt32BE();
        const json = await reader.take(length, "the manifest", false);
        const trailer = await reader.take(TRAILER.length, "the end marker", false);
        if (!trailer.equals(TRAILER)) throw damaged("the end marker is wrong");
        if (!(await reader.atEnd())) throw damaged("bytes follow the end marker");
        let manifest: Manifest;
        try {
          manifest = JSON.parse(json.toString("utf8")) as Manifest;
        } catch {
          throw damaged("the manifest is not valid JSON");
        }
        if (manifest.sha256 !== checksum) throw damaged(`the checksum does not match (the manifest says ${manifest.sha256}, the data is ${checksum})`);
        if (current) throw damaged(`the table ${current.name} has no end`);
        const listed = (manifest.tables ?? []).map((t) => `${t.name}:${t.rows}`).join(",");
        const seen = rowsSeen.map((t) => `${t.name}:${t.rows}`).join(",");
        if (listed !== seen) throw damaged("the tables and row counts differ from the manifest");
        await onRecord({ kind: "manifest", manifest });
        return manifest;
      }
      // The tag is part of the checksummed bytes for every record but the manifest.
      reader.hash.update(Buffer.from(tag));
      if (tag === "K") {
        const length = (await reader.take(4, "the secrets key")).readUInt32BE();
        if (length > 64 * 1024) throw damaged("the secrets key record is too long");
        await onRecord({ kind: "secrets-key", content: await reader.take(length, "the secrets key") });
      } else if (tag === "T") {
        if (current) throw damaged(`the table ${current.name} has no end`);
        const length = (await reader.take(2, "a table name")).readUInt16BE();
        current = { name: (await reader.take(length, "a table name")).toString("utf8"), rows: 0 };
        await onRecord({ kind: "table", name: current.name });
      } else if (tag === "D") {
        if (!current) throw damaged("rows outside a table");
        const length = (await reader.take(4, `the rows of ${current.name}`)).readUInt32BE();
        if (length > CHUNK_BYTES) throw damaged(`a chunk of ${length} bytes, above the ${CHUNK_BYTES} a backup writes`);
        const bytes = await reader.take(length, `the rows of ${current.name}`);
        // COPY's text format ends every row with a newline and escapes those inside values.
        for (let i = bytes.indexOf(10); i !== -1; i = bytes.indexOf(10, i + 1)) current.rows++;
        await onRecord({ kind: "data", bytes });
      } else if (tag === "E") {
        if (!current) throw damaged("a table end without a table");
        rowsSeen.push(current);
        current = undefined;
        await onRecord({ kind: "end-table" });
      } else {
        throw damaged(`an unknown record "${tag.replace(/[^\x20-\x7e]/g, "?")}"`);
      }
    }
  } finally {
    await file.close();
  }
}
