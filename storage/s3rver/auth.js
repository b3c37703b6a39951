'use strict';
/*
 * Request checks in front of s3rver's router (see main.js): bucket names, anonymous requests,
 * signature V4, scoped keys (keys.js), keys the router cannot match, and AbortMultipartUpload.
 */

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const keys = require('./keys');

const BUCKET_RE = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
let S3Error; // s3rver's error model and account registry, set by guard()
let AWSAccount;

function hasCredentials(ctx) {
  const query = ctx.query;
  return 'authorization' in ctx.headers || 'X-Amz-Algorithm' in query || 'Signature' in query;
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

/** The access key of a verified V4 request; '' for V2 (s3rver verifies those). */
function verifySignatureV4(ctx) {
  const parts = v4Parts(ctx);
  if (!parts) return '';
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
  return accessKey;
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

/** The middleware to put first, before s3rver's own. */
function guard(s3rverDir) {
  S3Error = require(path.join(s3rverDir, 'lib/models/error'));
  AWSAccount = require(path.join(s3rverDir, 'lib/models/account'));
  return async function guardRequest(ctx, next) {
    if (keys.isAdminPath(ctx)) {
      if (!hasCredentials(ctx)) throw new S3Error('AccessDenied', 'Access Denied');
      return keys.admin(ctx, verifySignatureV4);
    }
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
      keys.authorize(ctx, verified, bucket, /^\/[^/]+\/./s.test(ctx.path));
      if (verified && ctx.method === 'DELETE' && 'uploadId' in ctx.query) {
        return abortMultipartUpload(ctx);
      }
    }
    await next();
  };
}

module.exports = { guard };
