package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// uploadTo sends body to a campaign's items as NDJSON through instance 0.
func (e *env) uploadTo(path string, body io.Reader) (int, http.Header, map[string]any) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.urls[0]+path+"/items", body)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Errorf("upload: %v", err)
		return 0, nil, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header, out
}

// Issue 42: a node takes at most DISPATCH_UPLOADS campaign uploads at once (each may
// spool 512 MiB to disk); one more is 429 rate_limited with Retry-After, and is taken
// once a slot is free.
func TestConcurrentUploadsAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.UploadsPerNode = 1 })
	_, path := e.campaign(map[string]any{"items": map[string]any{"uids": []string{"a"}}})
	// slowUpload starts an upload that sends part of its items and waits (until feed is
	// closed); first answers its status.
	slowUpload := func() (feed *io.PipeWriter, first chan int) {
		slow, feed := io.Pipe()
		first = make(chan int, 1)
		go func() {
			code, _, _ := e.uploadTo(path, slow)
			slow.Close()
			first <- code
		}()
		// More than the client's write buffer: the request is on its way once this
		// returns (or fails: the upload was refused).
		feed.Write([]byte(strings.Repeat("\"b\"\n", 20_000)))
		return feed, first
	}
	feed, first := slowUpload()
	defer func() { feed.Close() }()
	var code int
	var hdr http.Header
	var out map[string]any
	// The slow upload's handler takes the slot once it runs, which on a loaded machine
	// may take a while: until then each upload here is taken (and adds an item). One of
	// them may hold the slot as that handler runs, which is then refused at once (and
	// tried again), not left waiting for its unread upload.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		select {
		case c := <-first:
			if c != 429 {
				t.Fatalf("the slow upload ended with %d before it was all sent", c)
			}
			feed.Close()
			feed, first = slowUpload()
			continue
		default:
		}
		code, hdr, out = e.uploadTo(path, strings.NewReader("\"c\"\n"))
		if code != 200 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	errObj, _ := out["error"].(map[string]any)
	if code != 429 || errObj["code"] != "rate_limited" || hdr.Get("Retry-After") == "" ||
		!strings.Contains(fmt.Sprint(errObj["message"]), "DISPATCH_UPLOADS") {
		t.Fatalf("an upload past the limit: %d %v (Retry-After %q), want 429 rate_limited naming DISPATCH_UPLOADS", code, out, hdr.Get("Retry-After"))
	}
	// A second slow upload, refused while the first holds the slot, hears so at once,
	// though it goes on sending (the server does not read its upload first).
	second, refused := slowUpload()
	defer second.Close()
	select {
	case c := <-refused:
		if c != 429 {
			t.Fatalf("a second slow upload: %d, want 429", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second slow upload was not refused while it kept sending")
	}
	feed.Close()
	if code := <-first; code != 200 {
		t.Fatalf("the first upload: %d", code)
	}
	if code, _, out := e.uploadTo(path, strings.NewReader("\"d\"\n")); code != 200 {
		t.Fatalf("an upload once the slot is free: %d %v", code, out)
	}
}

// Issue 42: an upload is given up after DISPATCH_UPLOAD_TIMEOUT in all, however
// steadily it trickles in (before, each read pushed the deadline on, and a trickle
// outlasted every bound); nothing of it is added.
func TestUploadTotalTimeIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.UploadTimeout = 300 * time.Millisecond })
	_, path := e.campaign(map[string]any{"items": map[string]any{"uids": []string{"a"}}})
	slow, feed := io.Pipe()
	go func() {
		defer feed.Close()
		for i := range 100 { // a line every 30 ms: never idle, 3 s in all
			if _, err := fmt.Fprintf(feed, "\"u%d\"\n", i); err != nil {
				return
			}
			time.Sleep(30 * time.Millisecond)
		}
	}()
	code, _, out := e.uploadTo(path, slow)
	slow.CloseWithError(io.ErrClosedPipe)
	errObj, _ := out["error"].(map[string]any)
	if code != 400 || !strings.Contains(fmt.Sprint(errObj["message"]), "DISPATCH_UPLOAD_TIMEOUT") {
		t.Fatalf("a trickling upload: %d %v, want 400 naming DISPATCH_UPLOAD_TIMEOUT", code, out)
	}
	c := e.admin("GET", path, nil)
	if num(c["total"]) != 1 {
		t.Fatalf("a refused upload added items: %v", c)
	}
}
