'use strict';
/*
 * Scoped access keys: a key pair that reaches only the buckets it lists, for pods (the panel
 * issues one per project and datastore: storage/credentials.py). The root key (from the
 * environment, see main.js) reaches everything and is the only one that may manage keys.
 *
 * Admin API, on the store's own port, signed with the root key (signature V4, like any request;
 * the body's SHA-256 must match the signed x-amz-content-sha256):
 *   PUT    /_ajuste/keys/<access key>   {"secretKey": "...", "buckets": ["a", "b"]}
 *   DELETE /_ajuste/keys/<access key>   revoke it (204; 404 when unknown)
 *   GET    /_ajuste/keys                {"keys": [{"accessKey": "...", "buckets": [...]}]}
 * `_ajuste` is no valid bucket name, so these paths never reach a bucket.
 *
 * Keys are kept in <data dir>/.ajuste-keys.json (mode 0600, replaced atomically), so they
 * survive restarts; a file is no bucket to s3rver's ListBuckets, and '.' starts no bucket name.
 *
 * What a scoped key may do, in its buckets only:
 *   - objects: GET, HEAD, PUT, DELETE, POST (multipart create/complete), upload parts, abort;
 *     a copy's source (x-amz-copy-source) must be one of its buckets too;
 *   - buckets: GET and HEAD (listings, multipart listings, location), POST ?delete;
 * and nothing else: no ListBuckets, no CreateBucket/DeleteBucket, no bucket configuration.
 */

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const ADMIN_PREFIX = '/_ajuste/';
const KEYS_FILE = '.ajuste-keys.json';
const ACCESS_KEY_RE = /^[A-Za-z0-9_-]{8,128}$/;
const BUCKET_RE = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const MAX_BODY = 64 * 1024;

let S3Error;
let AWSAccount;
let rootKey = '';
let keysFile = '';
// access key -> Set of bucket names
const scopes = new Map();

function isAdminPath(ctx) {
  return ctx.path === '/_ajuste' || ctx.path.startsWith(ADMIN_PREFIX);
}

// ---- persistence -----------------------------------------------------------------------

function save() {
  const keys = {};
  for (const [accessKey, buckets] of scopes) {
    keys[accessKey] = {
      secretKey: AWSAccount.DUMMY_ACCOUNT.accessKeys.get(accessKey),
      buckets: [...buckets].sort(),
    };
  }
  const temporary = `${keysFile}.${process.pid}.tmp`;
  fs.writeFileSync(temporary, JSON.stringify({ keys }), { mode: 0o600 });
  fs.renameSync(temporary, keysFile);
}

function grant(accessKey, secretKey, buckets) {
  AWSAccount.DUMMY_ACCOUNT.createKeyPair(accessKey, secretKey);
  scopes.set(accessKey, new Set(buckets));
}

/** Called once at start: remember the root key, load the keys kept in `directory`. */
function load(s3rverDir, directory, root) {
  S3Error = require(path.join(s3rverDir, 'lib/models/error'));
  AWSAccount = require(path.join(s3rverDir, 'lib/models/account'));
  rootKey = root;
  keysFile = path.join(directory, KEYS_FILE);
  let stored = { keys: {} };
  try {
    stored = JSON.parse(fs.readFileSync(keysFile, 'utf8'));
  } catch (err) {
    if (err.code !== 'ENOENT') throw err;
  }
  for (const [accessKey, entry] of Object.entries(stored.keys || {})) {
    if (accessKey !== rootKey) grant(accessKey, entry.secretKey, entry.buckets || []);
  }
}

// ---- authorization ---------------------------------------------------------------------

function denied() {
  return new S3Error('AccessDenied', 'Access Denied');
}

/** The access key of a signature V2 request (s3rver checks V2 signatures itself). */
function v2AccessKey(ctx) {
  const header = ctx.get('authorization');
  if (header.startsWith('AWS ')) return header.slice(4).split(':')[0];
  return String(ctx.query.AWSAccessKeyId || '');
}

function copySourceBucket(ctx) {
  // parsed exactly as s3rver's putObjectCopy parses it
  let source = decodeURI(ctx.headers['x-amz-copy-source']);
  source = source.startsWith('/') ? source.slice(1) : source;
  return source.split('/')[0];
}

/**
 * Refuse what `accessKey` may not do. `v4Key` is the key a verified V4 signature named (''
 * for V2); `bucket` is the path's bucket ('' for the service), `hasKey` whether it names an
 * object.
 */
function authorize(ctx, v4Key, bucket, hasKey) {
  const accessKey = v4Key || v2AccessKey(ctx);
  const scope = scopes.get(accessKey);
  if (!scope) return; // the root key
  if (!v4Key || !bucket || !scope.has(bucket)) throw denied();
  if ('x-amz-copy-source' in ctx.headers && !scope.has(copySourceBucket(ctx))) throw denied();
  if (hasKey) return;
  const listing = ctx.method === 'GET' || ctx.method === 'HEAD';
  const deletes = ctx.method === 'POST' && 'delete' in ctx.query;
  if (!listing && !deletes) throw denied();
}

// ---- the admin API ---------------------------------------------------------------------

async function readBody(ctx) {
  const chunks = [];
  let size = 0;
  for await (const chunk of ctx.req) {
    size += chunk.length;
    if (size > MAX_BODY) throw new S3Error('EntityTooLarge', 'The request body is too large.');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function badRequest(message) {
  return new S3Error('InvalidArgument', message);
}

function parseGrant(body) {
  let data;
  try {
    data = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw badRequest('The body is not JSON.');
  }
  const { secretKey, buckets } = data || {};
  if (typeof secretKey !== 'string' || secretKey.length < 16 || secretKey.length > 256) {
    throw badRequest('secretKey must be a string of 16 to 256 characters.');
  }
  if (!Array.isArray(buckets) || !buckets.every(b => typeof b === 'string' && BUCKET_RE.test(b))) {
    throw badRequest('buckets must be a list of bucket names.');
  }
  return { secretKey, buckets };
}

function listKeys() {
  const keys = [...scopes].map(([accessKey, buckets]) => ({
    accessKey,
    buckets: [...buckets].sort(),
  }));
  keys.sort((a, b) => (a.accessKey < b.accessKey ? -1 : 1));
  return { keys };
}

/** Serve /_ajuste/...; `verify(ctx)` checks the signature and returns its access key. */
async function admin(ctx, verify) {
  const accessKey = verify(ctx);
  if (!accessKey || accessKey !== rootKey) throw denied();
  const body = await readBody(ctx);
  const declared = ctx.get('x-amz-content-sha256');
  if (declared !== crypto.createHash('sha256').update(body).digest('hex')) {
    throw new S3Error('BadDigest', 'The body does not match its signed hash.');
  }
  const match = /^\/_ajuste\/keys(?:\/([^/]+))?$/.exec(ctx.path);
  if (!match) throw new S3Error('NotImplemented', 'No such admin resource.');
  const target = match[1] ? decodeURIComponent(match[1]) : '';
  if (!target && ctx.method === 'GET') {
    ctx.type = 'application/json';
    ctx.body = JSON.stringify(listKeys());
    return;
  }
  if (!ACCESS_KEY_RE.test(target) || target === rootKey) {
    throw badRequest('The access key must be 8 to 128 of [A-Za-z0-9_-], and not the root key.');
  }
  if (ctx.method === 'PUT') {
    const { secretKey, buckets } = parseGrant(body);
    grant(target, secretKey, buckets);
    save();
    ctx.status = 204;
  } else if (ctx.method === 'DELETE') {
    if (!scopes.has(target)) throw new S3Error('NoSuchKey', 'No such access key.');
    AWSAccount.DUMMY_ACCOUNT.revokeAccessKey(target);
    scopes.delete(target);
    save();
    ctx.status = 204;
  } else {
    throw new S3Error('MethodNotAllowed', 'The method is not allowed on this resource.');
  }
}

module.exports = { load, isAdminPath, authorize, admin };
