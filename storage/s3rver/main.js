'use strict';
/*
 * Ajuste's embedded object store: s3rver (npm, filesystem-backed) with the fixes that stock
 * s3rver 3.7.1 lacks on node 20. Started by storage/embedded.py:
 *
 *   node storage/s3rver/main.js <node_modules dir> <data dir> <address> <port> [cors origin...]
 *
 * Credentials come from AJUSTE_S3_ACCESS_KEY / AJUSTE_S3_SECRET_KEY (not argv: ps shows argv).
 * Prints one JSON line {"event": "listening", "address", "port"} on stdout once it answers.
 *
 * What it changes, and why:
 * - Key to file-name encoding. Stock s3rver joins keys into paths as they are: `../x` writes
 *   outside the bucket (and `../../x` outside the data directory), `a//b` and `a/./b` collide
 *   with `a/b`, and a segment over 255 bytes kills the whole process (ENAMETOOLONG in a stream
 *   without an error handler). Here each segment is escaped ('&' -> '&26', a leading '.' ->
 *   '&2e', '._S3rver_' -> '&2e_S3rver_', an empty segment -> '&-') and cut into 200-byte pieces
 *   joined by '&+/+', so every key maps to its own path inside its bucket.
 * - Listing. Stock ListObjects walks directories in file-name order (not key order), counts
 *   only keys against max-keys, ignores encoding-type, and its continuation token uses DES,
 *   which node 20's OpenSSL 3 refuses. Here keys are sorted by their UTF-8 bytes as S3 does,
 *   common prefixes count, the token is the last entry, and encoding-type=url is honoured.
 *   A per-bucket sorted index (dropped on every write) keeps pages cheap in big buckets.
 * - AbortMultipartUpload works (stock s3rver answers MethodNotAllowed and keeps the parts).
 * - CompleteMultipartUpload answers NoSuchUpload for an unknown upload id and InvalidPart for
 *   a part never uploaded or a wrong ETag (stock s3rver: InternalError, or a request that hangs).
 * - DeleteObjects honours Quiet (stock s3rver echoes every key, and a key with a control
 *   character then makes the whole XML answer unreadable).
 * - Signature V4 is verified (stock s3rver checks only that the access key exists, so any
 *   secret worked). The payload hash is taken as declared, not recomputed over the body.
 * - Anonymous requests are refused (stock s3rver serves them), bucket names in paths are
 *   checked before they reach the file system, and every bucket gets a default CORS rule
 *   (browser uploads with presigned URLs) unless one was set through the API.
 * - Scoped keys (keys.js): besides the root key, key pairs that reach only the buckets they
 *   list, issued and revoked by the panel through /_ajuste/keys, kept across restarts. Pods
 *   get those, never the root key.
 */

const fs = require('fs');
const path = require('path');

const { guard } = require('./auth');
const keys = require('./keys');
const { install } = require('./store');

const [modulesDir, directory, address, portText, ...corsOrigins] = process.argv.slice(2);
const s3rverDir = path.resolve(modulesDir, 's3rver');
const S3rver = require(s3rverDir);
const AWSAccount = require(path.join(s3rverDir, 'lib/models/account'));

function configureAccount() {
  const accessKey = process.env.AJUSTE_S3_ACCESS_KEY;
  const secretKey = process.env.AJUSTE_S3_SECRET_KEY;
  if (!accessKey || !secretKey) {
    throw new Error('AJUSTE_S3_ACCESS_KEY and AJUSTE_S3_SECRET_KEY must be set');
  }
  AWSAccount.DUMMY_ACCOUNT.revokeAccessKey('S3RVER');
  AWSAccount.DUMMY_ACCOUNT.createKeyPair(accessKey, secretKey);
  return accessKey;
}

async function main() {
  install(s3rverDir, corsOrigins);
  const rootKey = configureAccount();
  // s3rver logs to stdout; stdout carries only our "listening" line, so logs go to stderr.
  const writeStdout = process.stdout.write.bind(process.stdout);
  process.stdout.write = process.stderr.write.bind(process.stderr);
  fs.mkdirSync(directory, { recursive: true });
  keys.load(s3rverDir, directory, rootKey);
  const server = new S3rver({
    directory,
    address,
    port: Number(portText),
    silent: process.env.AJUSTE_S3_VERBOSE !== '1',
    vhostBuckets: false,
  });
  server.middleware.unshift(guard(s3rverDir));
  const listening = await server.run();
  // Once serving, one bad request must not take the store down for everyone: log and carry
  // on. (Not before: a port already in use must end the process, not leave it idle.)
  process.on('uncaughtException', err => console.error('s3rver: uncaught error:', err));
  writeStdout(
    JSON.stringify({ event: 'listening', address: listening.address, port: listening.port }) + '\n',
  );
  const stop = () => server.close().finally(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch(err => {
  console.error('s3rver: failed to start:', err);
  process.exit(1);
});
