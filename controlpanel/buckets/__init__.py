"""Object storage in the panel: datastores (S3 endpoints with encrypted credentials), the buckets
each project owns, and the pages, API and tasks over `storage/` (which alone talks to S3)."""
