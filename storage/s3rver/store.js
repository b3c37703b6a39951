'use strict';
/*
 * Ajuste's changes to s3rver's filesystem store and its bucket/object controllers (see main.js
 * for the list and the reasons). `install()` patches the s3rver modules in place.
 */

const fs = require('fs');
const path = require('path');

const OBJECT_SUFFIX = '._S3rver_object';
const PIECE_BYTES = 200; // + '&+' or the '._S3rver_metadata.json' suffix stays under 255
const JOIN = '&+/+';

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


// ---- the listing index: every key of a bucket, sorted as S3 sorts (UTF-8 bytes) ---------

// Built by one walk of the bucket, dropped by every write to it, so listing page after page
// of a 100k-object bucket costs a binary search each rather than a walk each.
const indexes = new Map();

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

function bucketIndex(store, bucket) {
  let index = indexes.get(bucket);
  if (!index) {
    index = [];
    for (const key of walkKeys(store.getBucketPath(bucket), '', true)) {
      index.push({ key, bytes: Buffer.from(key, 'utf8') });
    }
    index.sort((a, b) => Buffer.compare(a.bytes, b.bytes));
    indexes.set(bucket, index);
  }
  return index;
}

/** Index of the first entry >= `bytes` (or > `bytes` when `strict`). */
function bound(index, bytes, strict) {
  let low = 0;
  let high = index.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    const order = Buffer.compare(index[middle].bytes, bytes);
    if (order < 0 || (strict && order === 0)) low = middle + 1;
    else high = middle;
  }
  return low;
}

/** The keys that start with `prefix` and sort after `after`, in S3 order. */
function* keysAfter(store, bucket, prefix, after) {
  const index = bucketIndex(store, bucket);
  const start = Math.max(
    bound(index, Buffer.from(prefix, 'utf8'), false),
    bound(index, Buffer.from(after, 'utf8'), true),
  );
  for (let i = start; i < index.length && index[i].key.startsWith(prefix); i++) {
    yield index[i];
  }
}

function dropIndexOnWrite(FilesystemStore) {
  const writes = {
    putObject: args => args[0].bucket,
    copyObject: args => args[2],
    deleteObject: args => args[0],
    putObjectMultipart: args => args[0],
    putBucket: args => args[0],
    deleteBucket: args => args[0],
  };
  for (const [method, bucketOf] of Object.entries(writes)) {
    const original = FilesystemStore.prototype[method];
    FilesystemStore.prototype[method] = async function write(...args) {
      indexes.delete(bucketOf(args));
      try {
        return await original.apply(this, args);
      } finally {
        indexes.delete(bucketOf(args)); // also after: a listing may have run meanwhile
      }
    };
  }
}

// ---- store methods on the encoded layout ----------------------------------------------

function patchStore(FilesystemStore) {
  FilesystemStore.encodeKeyPath = encodeKeyPath;
  FilesystemStore.decodeKeyPath = decodeKeyPath;
  // used by s3rver's DeleteBucket (is it empty?)
  FilesystemStore.prototype.listObjects = async function listObjects(bucket, options) {
    const first = keysAfter(this, bucket, options.prefix || '', '').next();
    return { objects: first.done ? [] : [{ key: first.value.key }], commonPrefixes: [] };
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
  dropIndexOnWrite(FilesystemStore);
}

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

function patchCors(FilesystemStore, getConfigModel, corsOrigins) {
  const defaultCors = corsOrigins.length
    ? getConfigModel('cors').validate(defaultCorsXml(corsOrigins))
    : null;
  const storedSubresource = FilesystemStore.prototype.getSubresource;
  FilesystemStore.prototype.getSubresource = async function getSubresource(bucket, key, type) {
    const config = await storedSubresource.call(this, bucket, key, type);
    if (config || type !== 'cors' || key !== undefined) return config;
    return defaultCors;
  };
}


// ---- ListObjects (v1 and v2) -----------------------------------------------------------

function parseMaxKeys(text, S3Error) {
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
  let last = Buffer.from(after, 'utf8');
  for (const { key, bytes } of keys) {
    const index = delimiter ? key.indexOf(delimiter, prefix.length) : -1;
    const entry =
      index === -1
        ? { key, bytes, isPrefix: false }
        : { key: key.slice(0, index + delimiter.length), isPrefix: true };
    entry.bytes = entry.bytes || Buffer.from(entry.key, 'utf8');
    if (Buffer.compare(entry.bytes, last) <= 0) continue; // inside a prefix already listed
    if (entries.length === maxKeys) {
      truncated = true;
      break;
    }
    entries.push(entry);
    last = entry.bytes;
  }
  return { entries, truncated };
}

/** A listing row from a stat and the stored MD5; s3rver's getMetadata when those fail. */
async function objectEntry(store, bucket, key, encode) {
  let size;
  let modified;
  let etag;
  try {
    const objectPath = store.getResourcePath(bucket, key, 'object');
    const stat = fs.statSync(objectPath);
    [size, modified] = [stat.size, stat.mtime];
    etag = JSON.stringify(fs.readFileSync(objectPath + '.md5', 'utf8'));
  } catch (err) {
    try {
      const metadata = await store.getMetadata(bucket, key);
      size = metadata['content-length'];
      modified = new Date(metadata['last-modified']);
      etag = metadata.etag;
    } catch (missing) {
      if (missing.code === 'ENOENT') return null; // deleted while we listed
      throw missing;
    }
  }
  const entry = { Key: encode(key), LastModified: modified.toISOString(), ETag: etag };
  return { ...entry, Size: size, StorageClass: 'STANDARD' };
}

function listingPosition(query, v2) {
  if (!v2) return query.marker || '';
  const token = query['continuation-token'];
  if (token) return Buffer.from(token, 'base64').toString('utf8');
  return query['start-after'] || '';
}

function listingBody(query, page) {
  const { v2, bucket, prefix, delimiter, maxKeys, url, encode, entries, truncated } = page;
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
  return result;
}

function listObjectsHandler(S3Error) {
  return async function getBucket(ctx) {
    const query = ctx.query;
    const url = query['encoding-type'] === 'url';
    const page = {
      v2: query['list-type'] === '2',
      bucket: ctx.params.bucket,
      prefix: query.prefix || '',
      delimiter: query.delimiter || '',
      maxKeys: parseMaxKeys(query['max-keys'], S3Error),
      url,
      encode: url ? value => encodeURIComponent(value) : value => value,
    };
    const after = listingPosition(query, page.v2);
    const keys = page.maxKeys ? keysAfter(ctx.store, page.bucket, page.prefix, after) : [];
    Object.assign(page, pageEntries(keys, { ...page, after }));
    const objects = await Promise.all(
      page.entries
        .filter(e => !e.isPrefix)
        .map(e => objectEntry(ctx.store, page.bucket, e.key, page.encode)),
    );
    const result = listingBody(query, page);
    result.Contents = objects.filter(Boolean);
    result.CommonPrefixes = page.entries
      .filter(e => e.isPrefix)
      .map(e => ({ Prefix: page.encode(e.key) }));
    ctx.body = { ListBucketResult: result };
  };
}

// ---- DeleteObjects: Quiet mode ---------------------------------------------------------

function quietDeletes(objectCtrl) {
  const deleteMultipleObjects = objectCtrl.deleteMultipleObjects;
  objectCtrl.deleteMultipleObjects = async function quietAwareDelete(ctx) {
    await deleteMultipleObjects(ctx);
    const quiet = String(ctx.request.body.Delete.Quiet).toLowerCase() === 'true';
    if (quiet) ctx.body.DeleteResult.Deleted = [];
  };
}

// ---- CompleteMultipartUpload: answer as S3 does ------------------------------------------

// Stock s3rver reads the upload's files blindly: a made-up upload id is an InternalError
// (ENOENT) and a part never uploaded leaves the request hanging on a stream that never opens.
// S3 answers NoSuchUpload (404) and InvalidPart (400); so does this.
function checkedMultipart(FilesystemStore, S3Error) {
  const original = FilesystemStore.prototype.putObjectMultipart;
  FilesystemStore.prototype.putObjectMultipart = async function complete(bucket, uploadId, parts) {
    const id = String(uploadId || '');
    const uploadDir = path.join(this.getResourcePath(bucket, undefined, 'uploads'), id);
    if (!/^[0-9a-f]{32}$/.test(id) || !fs.existsSync(path.join(uploadDir, 'key'))) {
      throw new S3Error('NoSuchUpload', 'The specified upload does not exist.', { UploadId: id });
    }
    for (const part of parts) {
      let md5 = '';
      try {
        md5 = fs.readFileSync(path.join(uploadDir, `${part.number}.md5`), 'utf8').trim();
      } catch (err) {
        if (err.code !== 'ENOENT') throw err;
      }
      if (!Number.isInteger(part.number) || md5 !== part.etag) {
        throw new S3Error(
          'InvalidPart',
          'One or more of the specified parts could not be found. The part may not have been ' +
            "uploaded, or the specified entity tag may not have matched the part's entity tag.",
          { UploadId: id, PartNumber: String(part.number), ETag: part.etag },
        );
      }
    }
    return original.call(this, bucket, uploadId, parts);
  };
}

// ---- install ---------------------------------------------------------------------------

function install(s3rverDir, corsOrigins) {
  const lib = name => require(path.join(s3rverDir, 'lib', name));
  const FilesystemStore = lib('stores/filesystem');
  patchStore(FilesystemStore);
  checkedMultipart(FilesystemStore, lib('models/error'));
  patchCors(FilesystemStore, lib('models/config').getConfigModel, corsOrigins);
  lib('controllers/bucket').getBucket = listObjectsHandler(lib('models/error'));
  quietDeletes(lib('controllers/object'));
}

module.exports = { install, encodeKeyPath, decodeKeyPath };
