"""Object storage over S3 (the only place boto3 is imported): clients per datastore, bucket and
object operations, the volume-spec grammar and the sync engine. No Django."""
