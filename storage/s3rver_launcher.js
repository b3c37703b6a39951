'use strict';
/*
 * Ajuste's embedded object store: s3rver (npm, filesystem-backed) with the fixes that stock
 * s3rver 3.7.1 lacks on node 20. Started by storage/embedded.py:
 *
 *   node s3rver_launcher.js <node_modules dir> <data dir> <address> <port> [cors origin...]
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
 * - AbortMultipartUpload works (stock s3rver answers MethodNotAllowed and keeps the parts).
 * - DeleteObjects honours Quiet (stock s3rver echoes every key, and a key with a control
 *   character then makes the whole XML answer unreadable).
 * - Signature V4 is verified (stock s3rver checks only that the access key exists, so any
 *   secret worked). The payload hash is taken as declared, not recomputed over the body.
 * - Anonymous requests are refused (stock s3rver serves them), bucket names in paths are
 *   checked before they reach the file system, and every bucket gets a default CORS rule
 *   (browser uploads with presigned URLs) unless one was set through the API.
 */

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const [modulesDir, directory, address, portText, ...corsOrigins] = process.argv.slice(2);
const s3rverDir = path.resolve(modulesDir, 's3rver');
const S3rver = require(s3rverDir);
const FilesystemStore = require(path.join(s3rverDir, 'lib/stores/filesystem'));
const bucketCtrl = require(path.join(s3rverDir, 'lib/controllers/bucket'));
const objectCtrl = require(path.join(s3rverDir, 'lib/controllers/object'));
const AWSAccount = require(path.join(s3rverDir, 'lib/models/account'));
const S3Error = require(path.join(s3rverDir, 'lib/models/error'));
const { getConfigModel } = require(path.join(s3rverDir, 'lib/models/config'));

const OBJECT_SUFFIX = '._S3rver_object';
const PIECE_BYTES = 200; // + '&+' or the '._S3rver_metadata.json' suffix stays under 255
const JOIN = '&+/+';
const BUCKET_RE = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

// ---- key <-> relative path ------------------------------------------------------------

function escapeSegment(segment) {
  let out = segment.replace(/&/g, '&26').replace(/\._S3rver_/g, '&2e_S3rver_');
  if (out.startsWith('.')) out = '&2e' + out.slice(1);
  return out;
}

function splitLong(segment) {
  const pieces = [];
  let current = '';
  let bytes = 0;
  for (const char of segment) {
    const size = Buffer.byteLength(char);
    if (bytes + size > PIECE_BYTES) {
      pieces.push(current);
      current = '';
      bytes = 0;
    }
    current += char;
    bytes += size;
  }
  pieces.push(current);
  return pieces.join(JOIN);
}

function encodeSegments(segments, lastIsName) {
  return segments
    .map((segment, index) => {
      if (segment === '') return lastIsName && index === segments.length - 1 ? '' : '&-';
      return splitLong(escapeSegment(segment));
    })
    .join('/');
}

function encodeKeyPath(key) {
  if (!key) return '';
  return encodeSegments(key.split('/'), true);
}

function decodeKeyPath(keyPath) {
  return keyPath
    .split(JOIN)
    .join('')
    .split('/')
    .map(segment => (segment === '&-' ? '' : segment))
    .join('/')
    .replace(/&([0-9a-f]{2})/g, (match, hex) => String.fromCharCode(parseInt(hex, 16)));
}

FilesystemStore.encodeKeyPath = encodeKeyPath;
FilesystemStore.decodeKeyPath = decodeKeyPath;

// ---- store: listing and deletion on the encoded layout -----------------------------------

function* walkKeys(dir, relative, atBucketRoot) {
  let entries;
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch (err) {
    if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return;
    throw err;
  }
  for (const entry of entries) {
    if (entry.isDirectory()) {
      // bucket-level state (._S3rver_uploads): escaped key segments never start with '.'
      if (atBucketRoot && entry.name.startsWith('.')) continue;
      yield* walkKeys(path.join(dir, entry.name), relative + entry.name + '/', false);
    } else if (entry.name.endsWith(OBJECT_SUFFIX)) {
      yield decodeKeyPath(relative + entry.name.slice(0, -OBJECT_SUFFIX.length));
    }
  }
}

function compareBytes(a, b) {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/** Every key of `bucket` starting with `prefix`, in S3 order (UTF-8 bytes). */
function listKeys(store, bucket, prefix) {
  const bucketPath = store.getBucketPath(bucket);
  const slash = prefix.lastIndexOf('/');
  // Keys under `a/b/...` all live in the directory of `a/b`: start the walk there.
  const start = slash === -1 ? '' : encodeSegments(prefix.slice(0, slash).split('/'), false);
  const root = start ? path.join(bucketPath, start) : bucketPath;
  const keys = [];
  for (const key of walkKeys(root, start ? start + '/' : '', !start)) {
    if (key.startsWith(prefix)) keys.push(key);
  }
  return keys
    .map(key => [Buffer.from(key, 'utf8'), key])
    .sort((a, b) => Buffer.compare(a[0], b[0]))
    .map(pair => pair[1]);
}

FilesystemStore.prototype.listObjects = async function listObjects(bucket, options) {
  const keys = listKeys(this, bucket, options.prefix || '');
  const maxKeys = options.maxKeys || keys.length;
  return {
    objects: keys.slice(0, maxKeys).map(key => ({ key })),
    commonPrefixes: [],
    isTruncated: keys.length > maxKeys,
  };
};

FilesystemStore.prototype.deleteObject = async function deleteObject(bucket, key) {
  for (const resource of ['object', 'object.md5', 'metadata.json']) {
    try {
      fs.unlinkSync(this.getResourcePath(bucket, key, resource));
    } catch (err) {
      if (err.code !== 'ENOENT') throw err;
    }
  }
  // remove directories the key leaves empty, never the bucket itself
  const bucketPath = this.getBucketPath(bucket);
  let dir = path.dirname(this.getResourcePath(bucket, key, 'object'));
  while (dir.startsWith(bucketPath + path.sep)) {
    try {
      fs.rmdirSync(dir);
    } catch (err) {
      break; // not empty (or already gone)
    }
    dir = path.dirname(dir);
  }
};

// ---- default CORS for every bucket -----------------------------------------------------

function defaultCorsXml(origins) {
  const allowed = origins.map(origin => `<AllowedOrigin>${origin}</AllowedOrigin>`).join('');
  return (
    '<CORSConfiguration><CORSRule>' +
    allowed +
    '<AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod>' +
    '<AllowedMethod>HEAD</AllowedMethod><AllowedHeader>*</AllowedHeader>' +
    '<ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>3000</MaxAgeSeconds>' +
    '</CORSRule></CORSConfiguration>'
  );
}

const defaultCors = corsOrigins.length
  ? getConfigModel('cors').validate(defaultCorsXml(corsOrigins))
  : null;
const storedSubresource = FilesystemStore.prototype.getSubresource;
FilesystemStore.prototype.getSubresource = async function getSubresource(bucket, key, type) {
  const config = await storedSubresource.call(this, bucket, key, type);
  if (config || type !== 'cors' || key !== undefined) return config;
  return defaultCors;
};

// ---- ListObjects (v1 and v2) -----------------------------------------------------------

function parseMaxKeys(text) {
  if (text === undefined) return 1000;
  if (!/^\d+$/.test(text)) {
    throw new S3Error('InvalidArgument', 'Provided max-keys not an integer or within range', {
      ArgumentName: 'max-keys',
      ArgumentValue: text,
    });
  }
  return Math.min(1000, Number(text));
}

/**
 * The page after `after`: each key is an entry, or its common prefix when the delimiter occurs
 * after `prefix`. Entries come in non-decreasing order, so a page resumes after its last entry.
 */
function pageEntries(keys, { prefix, delimiter, after, maxKeys }) {
  const entries = [];
  let truncated = false;
  let last = after;
  for (const key of keys) {
    const index = delimiter ? key.indexOf(delimiter, prefix.length) : -1;
    const entry =
      index === -1
        ? { key, isPrefix: false }
        : { key: key.slice(0, index + delimiter.length), isPrefix: true };
    if (compareBytes(entry.key, last) <= 0) continue;
    if (entries.length === maxKeys) {
      truncated = true;
      break;
    }
    entries.push(entry);
    last = entry.key;
  }
  return { entries, truncated };
}

async function objectEntry(store, bucket, key, encode) {
  try {
    const metadata = await store.getMetadata(bucket, key);
    return {
      Key: encode(key),
      LastModified: new Date(metadata['last-modified']).toISOString(),
      ETag: metadata.etag,
      Size: metadata['content-length'],
      StorageClass: 'STANDARD',
    };
  } catch (err) {
    if (err.code === 'ENOENT') return null; // deleted while we listed
    throw err;
  }
}

function listingPosition(query, v2) {
  if (!v2) return query.marker || '';
  const token = query['continuation-token'];
  if (token) return Buffer.from(token, 'base64').toString('utf8');
  return query['start-after'] || '';
}

bucketCtrl.getBucket = async function getBucket(ctx) {
  const query = ctx.query;
  const v2 = query['list-type'] === '2';
  const bucket = ctx.params.bucket;
  const prefix = query.prefix || '';
  const delimiter = query.delimiter || '';
  const maxKeys = parseMaxKeys(query['max-keys']);
  const url = query['encoding-type'] === 'url';
  const encode = url ? value => encodeURIComponent(value) : value => value;
  const after = listingPosition(query, v2);
  const keys = maxKeys === 0 ? [] : listKeys(ctx.store, bucket, prefix);
  const { entries, truncated } = pageEntries(keys, { prefix, delimiter, after, maxKeys });
  const objects = await Promise.all(
    entries.filter(e => !e.isPrefix).map(e => objectEntry(ctx.store, bucket, e.key, encode)),
  );
  const prefixes = entries.filter(e => e.isPrefix).map(e => ({ Prefix: encode(e.key) }));
  const next = truncated ? entries[entries.length - 1].key : undefined;
  const result = {
    '@': { xmlns: 'http://s3.amazonaws.com/doc/2006-03-01/' },
    Name: bucket,
    Prefix: encode(prefix),
    MaxKeys: maxKeys,
    Delimiter: delimiter ? encode(delimiter) : undefined,
    IsTruncated: truncated,
    EncodingType: url ? 'url' : undefined,
  };
  if (v2) {
    result.KeyCount = entries.length;
    result.ContinuationToken = query['continuation-token'] || undefined;
    result.NextContinuationToken = next && Buffer.from(next, 'utf8').toString('base64');
    result.StartAfter = query['start-after'] ? encode(query['start-after']) : undefined;
  } else {
    result.Marker = encode(query.marker || '');
    result.NextMarker = next && encode(next);
  }
  result.Contents = objects.filter(Boolean);
  result.CommonPrefixes = prefixes;
  ctx.body = { ListBucketResult: result };
};

// ---- DeleteObjects: Quiet mode ---------------------------------------------------------

const deleteMultipleObjects = objectCtrl.deleteMultipleObjects;
objectCtrl.deleteMultipleObjects = async function quietAwareDelete(ctx) {
  await deleteMultipleObjects(ctx);
  const quiet = String(ctx.request.body.Delete.Quiet).toLowerCase() === 'true';
  if (quiet) ctx.body.DeleteResult.Deleted = [];
};

// ---- request guard, credentials, start -------------------------------------------------

function hasCredentials(ctx) {
  return 'authorization' in ctx.headers || 'X-Amz-Algorithm' in ctx.query || 'Signature' in ctx.query;
}

/**
 * The router matches `/:bucket/:key+`, whose segments cannot be empty, so keys with '//' or a
 * leading '/' found no route. Route on the key as one escaped segment instead; s3rver's own
 * param hook adds back a trailing '/', so it is left out here.
 */
function routeKeyAsOneSegment(ctx) {
  const match = /^\/([^/]+)\/(.+)$/s.exec(ctx.path);
  if (!match) return;
  let key = decodeURIComponent(match[2]);
  if (key === '/') {
    throw new S3Error('InvalidArgument', "The embedded store cannot hold the key '/'.");
  }
  if (key.endsWith('/')) key = key.slice(0, -1);
  ctx.routerPath = `/${match[1]}/${encodeURIComponent(key)}`;
}

// ---- signature V4 ----------------------------------------------------------------------

function rfc3986(text) {
  return encodeURIComponent(text).replace(
    /[!'()*]/g,
    char => '%' + char.charCodeAt(0).toString(16).toUpperCase(),
  );
}

function canonicalQuery(rawQuery) {
  const pairs = rawQuery
    .split('&')
    .filter(Boolean)
    .map(part => {
      const index = part.indexOf('=');
      const key = index === -1 ? part : part.slice(0, index);
      const value = index === -1 ? '' : part.slice(index + 1);
      return [rfc3986(decodeURIComponent(key)), rfc3986(decodeURIComponent(value))];
    })
    .filter(([key]) => key !== 'X-Amz-Signature');
  pairs.sort((a, b) => (a[0] === b[0] ? (a[1] < b[1] ? -1 : 1) : a[0] < b[0] ? -1 : 1));
  return pairs.map(([key, value]) => `${key}=${value}`).join('&');
}

function hmac(key, data) {
  return crypto.createHmac('sha256', key).update(data, 'utf8').digest();
}

/** The parts of a V4 signature, from the Authorization header or the presigned query. */
function v4Parts(ctx) {
  if (ctx.query['X-Amz-Algorithm']) {
    return {
      credential: String(ctx.query['X-Amz-Credential'] || ''),
      signedHeaders: String(ctx.query['X-Amz-SignedHeaders'] || ''),
      signature: String(ctx.query['X-Amz-Signature'] || ''),
      amzDate: String(ctx.query['X-Amz-Date'] || ''),
      payloadHash: String(ctx.query['X-Amz-Content-Sha256'] || 'UNSIGNED-PAYLOAD'),
    };
  }
  const header = ctx.get('authorization');
  if (!header.startsWith('AWS4-HMAC-SHA256 ')) return null; // V2: s3rver verifies those
  const fields = {};
  for (const part of header.slice(17).split(',')) {
    const [name, ...value] = part.trim().split('=');
    fields[name] = value.join('=');
  }
  return {
    credential: fields.Credential || '',
    signedHeaders: fields.SignedHeaders || '',
    signature: fields.Signature || '',
    amzDate: ctx.get('x-amz-date'),
    payloadHash: ctx.get('x-amz-content-sha256') || 'UNSIGNED-PAYLOAD',
  };
}

function verifySignatureV4(ctx) {
  const parts = v4Parts(ctx);
  if (!parts) return false;
  const [accessKey, date, region, service, terminator] = parts.credential.split('/');
  const account = AWSAccount.registry.get(accessKey);
  const secret = account && account.accessKeys.get(accessKey);
  if (!secret || terminator !== 'aws4_request') {
    throw new S3Error('InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist.');
  }
  const [rawPath, rawQuery = ''] = ctx.originalUrl.split(/\?(.*)/s);
  const headerNames = parts.signedHeaders.split(';');
  const canonicalHeaders = headerNames
    .map(name => `${name}:${String(ctx.get(name)).trim().replace(/\s+/g, ' ')}\n`)
    .join('');
  const canonicalRequest = [
    ctx.method === 'OPTIONS' ? ctx.get('access-control-request-method') : ctx.method,
    rawPath,
    canonicalQuery(rawQuery),
    canonicalHeaders,
    parts.signedHeaders,
    parts.payloadHash,
  ].join('\n');
  const scope = [date, region, service, terminator].join('/');
  const stringToSign = ['AWS4-HMAC-SHA256', parts.amzDate, scope,
    crypto.createHash('sha256').update(canonicalRequest, 'utf8').digest('hex')].join('\n');
  const key = [date, region, service, terminator].reduce(hmac, 'AWS4' + secret);
  const expected = Buffer.from(hmac(key, stringToSign).toString('hex'));
  const provided = Buffer.from(parts.signature);
  if (expected.length !== provided.length || !crypto.timingSafeEqual(expected, provided)) {
    throw new S3Error(
      'SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you provided.',
    );
  }
  return true;
}

/** DELETE /bucket/key?uploadId=...: drop the upload's parts (only for verified requests). */
function abortMultipartUpload(ctx) {
  const match = /^\/([^/]+)\/(.+)$/s.exec(ctx.path);
  const uploadId = String(ctx.query.uploadId || '');
  if (!match || !/^[0-9a-f]{32}$/.test(uploadId)) {
    throw new S3Error('NoSuchUpload', 'The specified upload does not exist.');
  }
  const uploads = ctx.store.getResourcePath(decodeURIComponent(match[1]), undefined, 'uploads');
  const uploadDir = path.join(uploads, uploadId);
  if (!fs.existsSync(uploadDir)) {
    throw new S3Error('NoSuchUpload', 'The specified upload does not exist.', {
      UploadId: uploadId,
    });
  }
  fs.rmSync(uploadDir, { recursive: true, force: true });
  ctx.status = 204;
}

function guard() {
  return async function guardRequest(ctx, next) {
    let bucket = '';
    try {
      bucket = decodeURIComponent(ctx.path.split('/')[1] || '');
      routeKeyAsOneSegment(ctx);
    } catch (err) {
      if (err instanceof S3Error) throw err;
      throw new S3Error('InvalidURI', "Couldn't parse the specified URI.");
    }
    if (bucket && (!BUCKET_RE.test(bucket) || bucket.includes('..'))) {
      throw new S3Error('InvalidBucketName', 'The specified bucket is not valid.', {
        BucketName: bucket,
      });
    }
    // OPTIONS is the browser's CORS preflight, which never carries credentials.
    if (ctx.method !== 'OPTIONS') {
      if (!hasCredentials(ctx)) throw new S3Error('AccessDenied', 'Access Denied');
      const verified = verifySignatureV4(ctx);
      if (verified && ctx.method === 'DELETE' && 'uploadId' in ctx.query) {
        return abortMultipartUpload(ctx);
      }
    }
    await next();
  };
}

function configureAccount() {
  const accessKey = process.env.AJUSTE_S3_ACCESS_KEY;
  const secretKey = process.env.AJUSTE_S3_SECRET_KEY;
  if (!accessKey || !secretKey) {
    throw new Error('AJUSTE_S3_ACCESS_KEY and AJUSTE_S3_SECRET_KEY must be set');
  }
  AWSAccount.DUMMY_ACCOUNT.revokeAccessKey('S3RVER');
  AWSAccount.DUMMY_ACCOUNT.createKeyPair(accessKey, secretKey);
}

async function main() {
  configureAccount();
  // s3rver logs to stdout; stdout carries only our "listening" line, so logs go to stderr.
  const writeStdout = process.stdout.write.bind(process.stdout);
  process.stdout.write = process.stderr.write.bind(process.stderr);
  fs.mkdirSync(directory, { recursive: true });
  const server = new S3rver({
    directory,
    address,
    port: Number(portText),
    silent: process.env.AJUSTE_S3_VERBOSE !== '1',
    vhostBuckets: false,
  });
  server.middleware.unshift(guard());
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
