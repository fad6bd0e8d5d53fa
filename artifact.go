package taskd

import (
	"strconv"
	"time"
)

// Artifact is a software artifact: a file the DDI endpoint hands devices (a firmware
// image, an update bundle), uploaded by an admin. Its bytes live in a blob backend (a
// directory or an S3 bucket, package artifact); the record says which, and where.
type Artifact struct {
	ID       int64  `json:"id"`
	Filename string `json:"filename"`
	// Size is the length of the bytes.
	Size      int64     `json:"size"`
	Hashes    Hashes    `json:"hashes"`
	CreatedAt time.Time `json:"created_at"`
	// Backend names the blob backend that holds the bytes ("dir" or "s3"), Key their
	// name there. Neither is shown.
	Backend string `json:"-"`
	Key     string `json:"-"`
}

// Hashes are an artifact's digests in lowercase hex, as hawkBit's DDI shows them (an
// artifact a deployment names by URL may come without md5 and sha256).
type Hashes struct {
	SHA1   string `json:"sha1"`
	MD5    string `json:"md5,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// ArtifactTarget is how the audit log names artifact id.
func ArtifactTarget(id int64) string { return "artifact:" + strconv.FormatInt(id, 10) }
