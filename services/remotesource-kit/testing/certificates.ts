import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface TestPki {
  caPem: string;
  serverCertPem: string;
  serverKeyPem: string;
  clientCertPem: string;
  clientKeyPem: string;
  /** A client certificate from another CA: presented, but not trusted by the server. */
  rogueClientCertPem: string;
  rogueClientKeyPem: string;
}

/**
 * A throw-away CA with a server certificate for 127.0.0.1 and client certificates, made with the
 * openssl command for one test file (short-lived, P-256 keys).
 */
export function createTestPki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), "rs-pki-"));
  const openssl = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe", timeout: 10_000 });
  const key = (name: string) => openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", `${name}.key`);
  const ca = (name: string) => {
    key(name);
    openssl("req", "-x509", "-new", "-key", `${name}.key`, "-out", `${name}.pem`, "-days", "2", "-subj", `/CN=${name}`);
  };
  const leaf = (name: string, issuer: string, extensions: string) => {
    key(name);
    openssl("req", "-new", "-key", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
    writeFileSync(join(dir, `${name}.ext`), extensions);
    openssl(
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      `${issuer}.pem`,
      "-CAkey",
      `${issuer}.key`,
      "-CAcreateserial",
      "-out",
      `${name}.pem`,
      "-days",
      "2",
      "-extfile",
      `${name}.ext`,
    );
  };
  try {
    ca("ca");
    ca("rogue-ca");
    leaf("server", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    leaf("client", "ca", "extendedKeyUsage=clientAuth\n");
    leaf("rogue-client", "rogue-ca", "extendedKeyUsage=clientAuth\n");
    const read = (file: string) => readFileSync(join(dir, file), "utf8");
    return {
      caPem: read("ca.pem"),
      serverCertPem: read("server.pem"),
      serverKeyPem: read("server.key"),
      clientCertPem: read("client.pem"),
      clientKeyPem: read("client.key"),
      rogueClientCertPem: read("rogue-client.pem"),
      rogueClientKeyPem: read("rogue-client.key"),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
