package artifact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/taskpull/taskd"
)

// S3Config is an S3-compatible bucket (AWS S3, MinIO, Ceph RGW, ...).
type S3Config struct {
	// Endpoint is the service's host[:port], without a scheme; empty: no bucket.
	Endpoint string
	Bucket   string
	// AccessKey and SecretKey sign the requests (AWS Signature Version 4).
	AccessKey, SecretKey string
	// Region is the bucket's region (zero: DefaultRegion); it is part of each
	// signature, and knowing it spares a lookup before the first request.
	Region string
	// Insecure speaks plain HTTP to the endpoint instead of HTTPS.
	Insecure bool
	// URLExpiry is how long a presigned URL a device is redirected to stays valid
	// (zero: DefaultURLExpiry). A download under way when it expires goes on; a
	// resumed one asks the server again and gets a new URL.
	URLExpiry time.Duration
	// PartSize is the size of a multipart upload's parts (zero: DefaultPartSize): an
	// artifact of at most a part goes in one PUT, a larger one in parts, each held in
	// memory while it is sent.
	PartSize int64
	// Transport, when set, carries the requests (tests).
	Transport http.RoundTripper
}

// The S3 defaults and bounds.
const (
	DefaultRegion    = "us-east-1"
	DefaultURLExpiry = 5 * time.Minute
	DefaultPartSize  = 16 << 20
	// MinPartSize and MaxPartSize are S3's bounds on a part; MaxParts its bound on
	// the parts of an upload, so an artifact is at most MaxParts parts.
	MinPartSize = 5 << 20
	MaxPartSize = 5 << 30
	MaxParts    = 10000
	// MaxURLExpiry is the longest a presigned URL may be valid (S3's bound).
	MaxURLExpiry = 7 * 24 * time.Hour
)

// CheckEndpoint refuses an endpoint that is not host[:port]: a URL's scheme is said
// by Insecure, and a path cannot be given.
func CheckEndpoint(endpoint string) error {
	if strings.Contains(endpoint, "://") {
		return errors.New("must be host[:port] without a scheme (https is the default; DISPATCH_ARTIFACT_S3_INSECURE=true speaks http)")
	}
	u, err := url.Parse("http://" + endpoint)
	if err != nil || u.Host != endpoint || u.Hostname() == "" {
		return fmt.Errorf("must be host[:port], got %q", endpoint)
	}
	return nil
}

// bucket keeps artifacts' bytes as objects of an S3 bucket, named by their keys.
type bucket struct {
	cfg    S3Config
	client *minio.Client
	// err is why no client could be made (an endpoint CheckEndpoint refuses); every
	// operation answers it.
	err error
}

func newBucket(cfg S3Config) *bucket {
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if cfg.URLExpiry <= 0 {
		cfg.URLExpiry = DefaultURLExpiry
	}
	if cfg.PartSize <= 0 {
		cfg.PartSize = DefaultPartSize
	}
	b := &bucket{cfg: cfg}
	if b.err = CheckEndpoint(cfg.Endpoint); b.err != nil {
		b.err = fmt.Errorf("DISPATCH_ARTIFACT_S3_ENDPOINT: %w", b.err)
		return b
	}
	b.client, b.err = minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    !cfg.Insecure,
		Region:    cfg.Region,
		Transport: cfg.Transport,
		// A bucket that does not answer fails the request in seconds, not after the
		// library's ten tries.
		MaxRetries: 3,
	})
	return b
}

func (b *bucket) name() string { return "s3" }

func (b *bucket) where() string {
	scheme := "https"
	if b.cfg.Insecure {
		scheme = "http"
	}
	return scheme + "://" + b.cfg.Endpoint + "/" + b.cfg.Bucket
}

func (b *bucket) prepare(ctx context.Context) error {
	if b.err != nil {
		return b.err
	}
	ok, err := b.client.BucketExists(ctx, b.cfg.Bucket)
	switch {
	case err != nil:
		return fmt.Errorf("DISPATCH_ARTIFACT_S3_BUCKET %s: %w", b.where(), err)
	case !ok:
		return fmt.Errorf("DISPATCH_ARTIFACT_S3_BUCKET: no bucket %q at %s (create it first)", b.cfg.Bucket, b.cfg.Endpoint)
	}
	return nil
}

// put sends r in one PUT when it is at most a part, else in a multipart upload (which
// the library aborts when it fails: S3 keeps no object of an upload not completed).
// Its context does not end with the request's: a cut-off upload ends by its body's
// failing, and the abort of its parts must still go out.
func (b *bucket) put(ctx context.Context, key string, r io.Reader, size int64) error {
	if b.err != nil {
		return b.err
	}
	ctx = context.WithoutCancel(ctx)
	if size < 0 {
		// Length unknown (no Content-Length): the library would start a multipart
		// upload whatever the size. Read up to a part first; a body that ends within
		// it goes in one PUT.
		first := make([]byte, b.cfg.PartSize)
		n, err := io.ReadFull(r, first)
		switch {
		// By identity: a body's failure may wrap io.ErrUnexpectedEOF (a connection cut
		// short), and is no end of it.
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			r, size = bytes.NewReader(first[:n]), int64(n)
		case err != nil:
			return err
		default:
			r = io.MultiReader(bytes.NewReader(first), r)
		}
	}
	_, err := b.client.PutObject(ctx, b.cfg.Bucket, key, r, size, minio.PutObjectOptions{
		PartSize: uint64(b.cfg.PartSize), ContentType: "application/octet-stream"})
	return err
}

func (b *bucket) remove(ctx context.Context, key string) error {
	if b.err != nil {
		return b.err
	}
	return b.client.RemoveObject(ctx, b.cfg.Bucket, key, minio.RemoveObjectOptions{})
}

func (b *bucket) serve(w http.ResponseWriter, r *http.Request, a taskd.Artifact) error {
	if b.err != nil {
		return taskd.Unavailable("artifact storage (s3)", b.err)
	}
	if noneMatch(r, etag(a)) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	method := http.MethodGet
	if r.Method == http.MethodHead { // a URL is signed for one method
		method = http.MethodHead
	}
	u, err := b.client.Presign(r.Context(), method, b.cfg.Bucket, a.Key, b.cfg.URLExpiry, url.Values{
		"response-content-disposition": {disposition(a.Filename)},
		"response-content-type":        {"application/octet-stream"},
	})
	if err != nil {
		return taskd.Unavailable("artifact storage (s3)", fmt.Errorf("presign artifact %d: %w", a.ID, err))
	}
	// The URL expires: no cache keeps the redirect longer than that.
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u.String(), http.StatusFound)
	return nil
}
