package artifact_test

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeS3 speaks as much of S3's REST protocol as the artifact backend uses, for one
// bucket: HEAD of the bucket; PUT (one request, or a multipart upload: initiate, parts,
// complete, abort), HEAD, GET (with ranges, as a device following a presigned URL
// does) and DELETE of objects. It checks that each request is signed with the access
// key (AWS Signature Version 4, in the Authorization header or, presigned, in the
// query), without checking the signature itself; it decodes aws-chunked bodies (the
// signed streaming upload minio-go makes over plain HTTP). Each request is recorded
// in ops as "<op> <key>".
type fakeS3 struct {
	t         *testing.T
	bucket    string
	accessKey string
	srv       *httptest.Server

	mu      sync.Mutex
	objects map[string][]byte
	uploads map[string]map[int][]byte // upload id -> part number -> bytes
	ops     []string
	nextID  int
	// chunked counts the bodies that came aws-chunked.
	chunked int
}

func newFakeS3(t *testing.T, tls bool) (*fakeS3, *httptest.Server) {
	f := &fakeS3{t: t, bucket: "firmware", accessKey: "AKIDTEST", objects: map[string][]byte{},
		uploads: map[string]map[int][]byte{}}
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(f)
	} else {
		srv = httptest.NewServer(f)
	}
	t.Cleanup(srv.Close)
	f.srv = srv
	return f, srv
}

func (f *fakeS3) record(op, key string) {
	f.mu.Lock()
	f.ops = append(f.ops, op+" "+key)
	f.mu.Unlock()
}

// opsSoFar returns the requests recorded, and forgets them.
func (f *fakeS3) opsSoFar() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

func (f *fakeS3) object(key string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.objects[key]
	return b, ok
}

// left is what the bucket holds: its objects' keys and its uploads not completed.
func (f *fakeS3) left() (objects, uploads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.objects), len(f.uploads)
}

func s3Error(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, code)
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	credential := q.Get("X-Amz-Credential")
	if auth := r.Header.Get("Authorization"); auth != "" {
		credential, _, _ = strings.Cut(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 Credential="), ",")
	}
	if !strings.HasPrefix(credential, f.accessKey+"/") || !strings.HasSuffix(credential, "/us-east-1/s3/aws4_request") {
		s3Error(w, http.StatusForbidden, "AccessDenied")
		return
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if bucket != f.bucket {
		s3Error(w, http.StatusNotFound, "NoSuchBucket")
		return
	}
	switch {
	case key == "" && r.Method == http.MethodHead:
		f.record("HeadBucket", "")
	case key == "":
		s3Error(w, http.StatusNotImplemented, "NotImplemented")
	case r.Method == http.MethodPost && q.Has("uploads"):
		f.mu.Lock()
		f.nextID++
		id := "upload-" + strconv.Itoa(f.nextID)
		f.uploads[id] = map[int][]byte{}
		f.mu.Unlock()
		f.record("CreateMultipartUpload", key)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><InitiateMultipartUploadResult><Bucket>%s</Bucket><Key>%s</Key><UploadId>%s</UploadId></InitiateMultipartUploadResult>`,
			bucket, key, id)
	case r.Method == http.MethodPut && q.Has("uploadId"):
		body, ok := f.body(w, r)
		if !ok {
			return
		}
		n, _ := strconv.Atoi(q.Get("partNumber"))
		f.mu.Lock()
		parts, found := f.uploads[q.Get("uploadId")]
		if found {
			parts[n] = body
		}
		f.mu.Unlock()
		if !found {
			s3Error(w, http.StatusNotFound, "NoSuchUpload")
			return
		}
		f.record("UploadPart", key)
		w.Header().Set("ETag", etagOf(body))
	case r.Method == http.MethodPost && q.Has("uploadId"):
		var complete struct {
			Parts []struct {
				PartNumber int
				ETag       string
			} `xml:"Part"`
		}
		if err := xml.NewDecoder(r.Body).Decode(&complete); err != nil {
			s3Error(w, http.StatusBadRequest, "MalformedXML")
			return
		}
		f.mu.Lock()
		parts, found := f.uploads[q.Get("uploadId")]
		var whole []byte
		for _, p := range complete.Parts {
			whole = append(whole, parts[p.PartNumber]...)
		}
		if found {
			delete(f.uploads, q.Get("uploadId"))
			f.objects[key] = whole
		}
		f.mu.Unlock()
		if !found {
			s3Error(w, http.StatusNotFound, "NoSuchUpload")
			return
		}
		f.record("CompleteMultipartUpload", key)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult><Bucket>%s</Bucket><Key>%s</Key><ETag>%s</ETag></CompleteMultipartUploadResult>`,
			bucket, key, etagOf(whole))
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		f.mu.Lock()
		delete(f.uploads, q.Get("uploadId"))
		f.mu.Unlock()
		f.record("AbortMultipartUpload", key)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut:
		body, ok := f.body(w, r)
		if !ok {
			return
		}
		f.mu.Lock()
		f.objects[key] = body
		f.mu.Unlock()
		f.record("PutObject", key)
		w.Header().Set("ETag", etagOf(body))
	case r.Method == http.MethodDelete:
		f.mu.Lock()
		delete(f.objects, key)
		f.mu.Unlock()
		f.record("DeleteObject", key)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		b, ok := f.object(key)
		if !ok {
			s3Error(w, http.StatusNotFound, "NoSuchKey")
			return
		}
		if r.Header.Get("Authorization") == "" { // presigned: the query carries the signature
			if q.Get("X-Amz-Signature") == "" || q.Get("X-Amz-Expires") == "" {
				s3Error(w, http.StatusForbidden, "AccessDenied")
				return
			}
		}
		f.record(map[string]string{"GET": "GetObject", "HEAD": "HeadObject"}[r.Method], key)
		if d := q.Get("response-content-disposition"); d != "" {
			w.Header().Set("Content-Disposition", d)
		}
		w.Header().Set("ETag", etagOf(b))
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	default:
		s3Error(w, http.StatusNotImplemented, "NotImplemented")
	}
}

func etagOf(b []byte) string {
	sum := md5.Sum(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

// body reads a PUT's bytes, decoding a signed streaming (aws-chunked) body, and checks
// them against the lengths the request states.
func (f *fakeS3) body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, false // the client went away mid-body
	}
	b := raw
	if r.Header.Get("X-Amz-Content-Sha256") == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" {
		f.mu.Lock()
		f.chunked++
		f.mu.Unlock()
		if b, err = decodeChunked(raw); err != nil {
			f.t.Errorf("aws-chunked body: %v", err)
			s3Error(w, http.StatusBadRequest, "IncompleteBody")
			return nil, false
		}
		if n, _ := strconv.Atoi(r.Header.Get("X-Amz-Decoded-Content-Length")); n != len(b) {
			s3Error(w, http.StatusBadRequest, "IncompleteBody")
			return nil, false
		}
	}
	return b, true
}

// decodeChunked decodes an aws-chunked body: "<hex size>;chunk-signature=<sig>\r\n",
// the bytes, "\r\n", until a chunk of size 0.
func decodeChunked(raw []byte) ([]byte, error) {
	br := bufio.NewReader(bytes.NewReader(raw))
	var out []byte
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		head, _, _ := strings.Cut(strings.TrimSpace(line), ";")
		n, err := strconv.ParseInt(head, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("chunk header %q", line)
		}
		if n == 0 {
			return out, nil
		}
		chunk := make([]byte, n+2)
		if _, err := io.ReadFull(br, chunk); err != nil {
			return nil, err
		}
		if !bytes.HasSuffix(chunk, []byte("\r\n")) {
			return nil, fmt.Errorf("a chunk of %d bytes does not end in CRLF", n)
		}
		out = append(out, chunk[:n]...)
	}
}

// opNames are ops without their keys.
func opNames(ops []string) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i], _, _ = strings.Cut(op, " ")
	}
	return out
}
