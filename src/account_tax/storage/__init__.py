"""Storage: the checkpoint manifest, upload to S3 with verified receipts, retention, and the
local S3 server."""
