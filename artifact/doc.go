// Package artifact keeps software artifacts: the files (firmware images, update
// bundles) that the DDI endpoint hands devices.
//
// An admin uploads an artifact's bytes (Upload); they are streamed to a blob backend
// while their size and their SHA-1, MD5 and SHA-256 are computed, and refused past a
// size limit. The record (filename, size, hashes, where the bytes are) is written to
// MySQL only once the backend holds the bytes durably: an upload that fails, is too
// large or is cut off leaves no record and no bytes.
//
// There are two backends. The directory (Config.Dir) writes each upload to a
// temporary file beside its final name, syncs it and renames it into place; devices get
// the bytes from the server itself, with ranges (Serve). An S3-compatible bucket
// (Config.S3) takes the bytes in one PUT, or in a multipart upload when they are more
// than a part; devices are redirected to a presigned GET URL of the object, short-lived,
// and fetch the bytes (and ranges of them) from the bucket.
//
// Devices are not authenticated here: the DDI endpoint checks a device's token, then
// calls Serve for the artifact the device's deployment names, and Lookup for the size
// and hashes a deployment lists.
//
// An artifact that a task not deleted names in its params (a DDI chunk's
// {"artifact_id": n}) cannot be deleted (Delete answers conflict, naming the tasks).
package artifact
