package app_test

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// An upload that arrives slowly holds no lock and no database connection: it is read
// into a temporary file first. A move of the campaign made while an upload trickles in
// is not held up by it (before, the upload's transaction held the campaign's row from
// its first byte to its last, for as long as the client liked), and the upload, when
// it ends, finds the campaign started and adds nothing.
func TestSlowUploadHoldsNoLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id, path := e.campaign(map[string]any{"items": map[string]any{"uids": []string{"a", "b"}}})
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", e.urls[0]+path+"/items", pr)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "text/csv")
	uploaded := make(chan int, 1)
	go func() {
		resp, err := e.client.Do(req)
		if err != nil {
			uploaded <- 0
			return
		}
		resp.Body.Close()
		uploaded <- resp.StatusCode
	}()
	if _, err := pw.Write([]byte("c\nd\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the upload is under way, and stalls
	moved := make(chan int, 1)
	go func() {
		code, _ := e.do(0, "POST", path+"/start", adminToken, nil)
		moved <- code
	}()
	select {
	case code := <-moved:
		if code != 200 {
			t.Fatalf("start during an upload: %d", code)
		}
	case <-time.After(10 * time.Second):
		pw.Close()
		t.Fatalf("the start of campaign %d waited for a stalled upload", id)
	}
	pw.Close()
	if code := <-uploaded; code != http.StatusConflict {
		t.Fatalf("the upload, ended after the start: %d, want 409", code)
	}
	if c := e.admin("GET", path, nil); num(c["total"]) != 2 {
		t.Fatalf("total %v, want the 2 items of the create", c["total"])
	}
}
