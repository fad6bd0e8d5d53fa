package artifact_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/artifact"
)

// The S3 backend is tested against fakeS3, over plain HTTP (minio-go then signs the
// body as it streams, aws-chunked) and over TLS (the body goes unsigned, as to AWS).

const partSize = artifact.MinPartSize // 5 MiB: S3's smallest part

// s3Fixture is a service keeping its bytes in a fake bucket.
func s3Fixture(t *testing.T, tls bool, cfg artifact.Config) (*fixture, *fakeS3, string) {
	t.Helper()
	fake, srv := newFakeS3(t, tls)
	u, _ := url.Parse(srv.URL)
	cfg.S3 = artifact.S3Config{Endpoint: u.Host, Bucket: fake.bucket, AccessKey: fake.accessKey, SecretKey: "secret",
		Insecure: !tls, PartSize: partSize, Transport: srv.Client().Transport}
	f := newFixture(t, cfg)
	if got := fake.opsSoFar(); !slices.Equal(got, []string{"HeadBucket "}) {
		t.Fatalf("Prepare sent %v, want a HEAD of the bucket", got)
	}
	return f, fake, u.Host
}

func forEachScheme(t *testing.T, test func(t *testing.T, tls bool)) {
	for _, tls := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[tls], func(t *testing.T) {
			t.Parallel()
			test(t, tls)
		})
	}
}

// An artifact of at most a part goes in one PUT, whether its length is known or not; a
// larger one in a multipart upload of part-sized parts. The object holds the bytes,
// the record names it.
func TestS3Upload(t *testing.T) {
	t.Parallel()
	forEachScheme(t, func(t *testing.T, tls bool) {
		f, fake, _ := s3Fixture(t, tls, artifact.Config{})
		for _, c := range []struct {
			n       int
			size    int64 // -1: unknown
			want    []string
			comment string
		}{
			{100_000, 100_000, []string{"PutObject"}, "small, length known"},
			{100_000, -1, []string{"PutObject"}, "small, length unknown"},
			{partSize, partSize, []string{"PutObject"}, "one part exactly"},
			{2*partSize + 1000, 2*partSize + 1000,
				[]string{"CreateMultipartUpload", "UploadPart", "UploadPart", "UploadPart", "CompleteMultipartUpload"}, "three parts, length known"},
			{2*partSize + 1000, -1,
				[]string{"CreateMultipartUpload", "UploadPart", "UploadPart", "UploadPart", "CompleteMultipartUpload"}, "three parts, length unknown"},
		} {
			body := randomBytes(c.n)
			a, err := f.svc.Upload(t.Context(), "ops", "fw.swu", bytes.NewReader(body), c.size)
			if err != nil {
				t.Fatalf("%s: %v", c.comment, err)
			}
			if got := opNames(fake.opsSoFar()); !slices.Equal(got, c.want) {
				t.Errorf("%s: requests %v, want %v", c.comment, got, c.want)
			}
			if stored, ok := fake.object(a.Key); !ok || !bytes.Equal(stored, body) {
				t.Errorf("%s: the object holds %d bytes, want the %d uploaded", c.comment, len(stored), c.n)
			}
			if a.Backend != "s3" || a.Size != int64(c.n) || a.Hashes != hashesOf(body) {
				t.Errorf("%s: record %+v", c.comment, a)
			}
		}
		// Over plain HTTP minio-go signs the bodies as they stream; over TLS it does not.
		fake.mu.Lock()
		chunked := fake.chunked
		fake.mu.Unlock()
		if tls != (chunked == 0) {
			t.Errorf("%d bodies came aws-chunked over %s", chunked, map[bool]string{false: "http", true: "https"}[tls])
		}
	})
}

// An upload cut off midway, or passing the limit, after parts went up: the multipart
// upload is aborted, and neither an object nor a record is left. A small one cut off
// sends nothing.
func TestS3FailedUploadLeavesNothing(t *testing.T) {
	t.Parallel()
	forEachScheme(t, func(t *testing.T, tls bool) {
		f, fake, _ := s3Fixture(t, tls, artifact.Config{MaxBytes: 2 * partSize})
		body := randomBytes(3 * partSize)
		for _, c := range []struct {
			r       io.Reader
			size    int64
			code    taskd.Code
			comment string
		}{
			{&cutReader{b: body, n: partSize + 1000, err: io.ErrUnexpectedEOF}, -1, taskd.CodeInvalid, "cut, length unknown"},
			{&cutReader{b: body, n: partSize + 1000, err: io.ErrUnexpectedEOF}, 2 * partSize, taskd.CodeInvalid, "cut, length known"},
			{bytes.NewReader(body), -1, taskd.CodeTooLarge, "over the limit"},
		} {
			_, err := f.svc.Upload(t.Context(), "ops", "fw.swu", c.r, c.size)
			if taskd.ErrorCode(err) != c.code {
				t.Errorf("%s: %v, want %s", c.comment, err, c.code)
			}
			ops := opNames(fake.opsSoFar())
			if len(ops) < 3 || ops[0] != "CreateMultipartUpload" || ops[len(ops)-1] != "AbortMultipartUpload" || slices.Contains(ops, "CompleteMultipartUpload") {
				t.Errorf("%s: requests %v, want parts, then the abort", c.comment, ops)
			}
			if objects, uploads := fake.left(); objects != 0 || uploads != 0 {
				t.Errorf("%s: %d objects and %d uploads left", c.comment, objects, uploads)
			}
			if n := f.count(); n != 0 {
				t.Errorf("%s: %d records", c.comment, n)
			}
		}
		_, err := f.svc.Upload(t.Context(), "ops", "fw.swu", &cutReader{b: body, n: 1000, err: io.ErrUnexpectedEOF}, -1)
		if taskd.ErrorCode(err) != taskd.CodeInvalid {
			t.Errorf("small, cut: %v", err)
		}
		if ops := fake.opsSoFar(); len(ops) != 0 {
			t.Errorf("small, cut: requests %v, want none", ops)
		}
	})
}

// A device is redirected (302) to a presigned GET URL of the object, on the bucket's
// endpoint, expiring after URLExpiry, that names the file; following it gets the bytes
// and ranges of them. A device whose copy is current gets 304 without a redirect; a
// HEAD is redirected to a URL presigned for HEAD. Delete deletes the object.
func TestS3ServeRedirects(t *testing.T) {
	t.Parallel()
	forEachScheme(t, func(t *testing.T, tls bool) {
		f, fake, host := s3Fixture(t, tls, artifact.Config{})
		body := randomBytes(200_000)
		a, err := f.svc.Upload(t.Context(), "ops", "fw 2.swu", bytes.NewReader(body), -1)
		if err != nil {
			t.Fatal(err)
		}
		fake.opsSoFar()
		srv := serveHTTP(t, f.svc)
		path := srv.URL + "/" + strconv.FormatInt(a.ID, 10)

		resp, _ := get(t, "GET", path, nil)
		loc, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusFound || err != nil {
			t.Fatalf("GET: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		q := loc.Query()
		scheme := map[bool]string{false: "http", true: "https"}[tls]
		if loc.Scheme != scheme || loc.Host != host || loc.Path != "/"+fake.bucket+"/"+a.Key {
			t.Errorf("redirect to %s://%s%s, want %s://%s/%s/%s", loc.Scheme, loc.Host, loc.Path, scheme, host, fake.bucket, a.Key)
		}
		if q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" || len(q.Get("X-Amz-Signature")) != 64 || q.Get("X-Amz-Expires") != "300" ||
			!strings.HasPrefix(q.Get("X-Amz-Credential"), fake.accessKey+"/") || q.Get("response-content-disposition") != `attachment; filename="fw 2.swu"` {
			t.Errorf("presigned query: %v", q)
		}
		if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("ETag") != `"`+a.Hashes.SHA256+`"` {
			t.Errorf("redirect headers: %v", resp.Header)
		}
		if len(fake.opsSoFar()) != 0 {
			t.Error("presigning asked the bucket")
		}

		// The device follows it (the fake takes any signature; it checks it is there).
		client := fake.srv.Client() // trusts its certificate
		req, _ := http.NewRequest("GET", loc.String(), nil)
		req.Header.Set("Range", "bytes=100-199")
		got, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(got.Body)
		got.Body.Close()
		if got.StatusCode != http.StatusPartialContent || !bytes.Equal(b, body[100:200]) || got.Header.Get("Content-Disposition") != `attachment; filename="fw 2.swu"` {
			t.Errorf("following the redirect with a range: %d, %d bytes, %v", got.StatusCode, len(b), got.Header)
		}

		resp, _ = get(t, "GET", path, map[string]string{"If-None-Match": `"` + a.Hashes.SHA256 + `"`})
		if resp.StatusCode != http.StatusNotModified || resp.Header.Get("Location") != "" {
			t.Errorf("GET If-None-Match: %d, Location %q; want 304 and no redirect", resp.StatusCode, resp.Header.Get("Location"))
		}
		resp, _ = get(t, "HEAD", path, nil)
		if loc, _ := url.Parse(resp.Header.Get("Location")); resp.StatusCode != http.StatusFound || loc == nil || loc.Query().Get("X-Amz-Signature") == "" {
			t.Errorf("HEAD: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		if resp, _ := get(t, "GET", srv.URL+"/999999", nil); resp.StatusCode != 404 {
			t.Errorf("GET an unknown id: %d, want 404", resp.StatusCode)
		}

		fake.opsSoFar()
		if err := f.svc.Delete(t.Context(), "ops", a.ID); err != nil {
			t.Fatal(err)
		}
		if ops := fake.opsSoFar(); !slices.Equal(ops, []string{"DeleteObject " + a.Key}) {
			t.Errorf("delete: requests %v", ops)
		}
		if objects, _ := fake.left(); objects != 0 {
			t.Errorf("%d objects left after the delete", objects)
		}
	})
}

// A bucket that does not exist fails Prepare, naming the setting.
func TestS3PrepareNamesAMissingBucket(t *testing.T) {
	t.Parallel()
	fake, srv := newFakeS3(t, false)
	u, _ := url.Parse(srv.URL)
	svc := artifact.New(nil, artifact.Config{S3: artifact.S3Config{Endpoint: u.Host, Bucket: "nope", AccessKey: fake.accessKey,
		SecretKey: "secret", Insecure: true}}, nil, slog.New(slog.DiscardHandler))
	if err := svc.Prepare(t.Context()); err == nil || !strings.Contains(err.Error(), "DISPATCH_ARTIFACT_S3_BUCKET") {
		t.Fatalf("Prepare with no such bucket: %v", err)
	}
	for _, endpoint := range []string{"http://s3.example.com", "s3.example.com/path", ""} {
		if err := artifact.CheckEndpoint(endpoint); err == nil {
			t.Errorf("CheckEndpoint(%q) passed", endpoint)
		}
	}
	for _, endpoint := range []string{"s3.amazonaws.com", "127.0.0.1:9000", "[::1]:9000"} {
		if err := artifact.CheckEndpoint(endpoint); err != nil {
			t.Errorf("CheckEndpoint(%q): %v", endpoint, err)
		}
	}
}
