package console_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
)

// part is one part of a multipart form: a field, or a file when filename is set.
type part struct{ name, filename, value string }

// postMultipart posts the parts, in order, as a browser posts a form of
// enctype="multipart/form-data".
func postMultipart(t *testing.T, u string, session *http.Cookie, parts ...part) reply {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, p := range parts {
		var w io.Writer
		var err error
		if p.filename != "" {
			w, err = mw.CreateFormFile(p.name, p.filename)
		} else {
			w, err = mw.CreateFormField(p.name)
		}
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.value)
	}
	mw.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, u, &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.AddCookie(&http.Cookie{Name: session.Name, Value: session.Value})
	res, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{res, string(b)}
}

// artifactCount is how many artifacts the API lists.
func artifactCount(t *testing.T, base string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/admin/artifacts", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var list struct{ Artifacts []map[string]any }
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return len(list.Artifacts)
}

// The upload form's file is streamed to the API once its CSRF token, the form's first
// part, is checked: a form without the token, with another's, or with the file before
// it is refused (403) and nothing is kept. A file over the limit shows the API's
// too_large message, and nothing is kept either.
func TestArtifactUploadForm(t *testing.T) {
	t.Parallel()
	base := startNodeWith(t, newShared(t), clock.Real{}, func(c *app.Config) { c.ArtifactMaxBytes = 64 << 10 }, "ops="+adminToken)
	session, csrf := signIn(t, base, adminToken, nil)
	firmware := strings.Repeat("swu!", 1000)

	for name, parts := range map[string][]part{
		"no token":           {{name: "file", filename: "fw.swu", value: firmware}},
		"a forged token":     {{name: "csrf", value: "forged"}, {name: "file", filename: "fw.swu", value: firmware}},
		"the file before it": {{name: "file", filename: "fw.swu", value: firmware}, {name: "csrf", value: csrf}},
	} {
		if res := postMultipart(t, base+"/console/artifacts", session, parts...); res.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403:\n%.300s", name, res.StatusCode, res.body)
		}
	}
	if n := artifactCount(t, base); n != 0 {
		t.Fatalf("%d artifacts after the refused forms", n)
	}

	res := postMultipart(t, base+"/console/artifacts", session, part{name: "csrf", value: csrf},
		part{name: "file", filename: "fw.swu", value: firmware})
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/console/artifacts?uploaded=") {
		t.Fatalf("upload: %d to %q:\n%.500s", res.StatusCode, res.Header.Get("Location"), res.body)
	}
	page := send(t, http.MethodGet, base+res.Header.Get("Location"), nil, nil, session)
	sum := sha256.Sum256([]byte(firmware))
	if !strings.Contains(page.body, "Uploaded fw.swu as artifact") || !strings.Contains(page.body, "3.9 KiB") ||
		!strings.Contains(page.body, hex.EncodeToString(sum[:])[:12]) {
		t.Fatalf("the list after the upload:\n%s", page.body)
	}

	res = postMultipart(t, base+"/console/artifacts", session, part{name: "csrf", value: csrf},
		part{name: "file", filename: "big.swu", value: strings.Repeat("x", 100<<10)})
	if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(res.body, "Not uploaded: artifact: over 65536 bytes") {
		t.Fatalf("an upload over the limit: %d:\n%.2000s", res.StatusCode, res.body)
	}
	res = postMultipart(t, base+"/console/artifacts", session, part{name: "csrf", value: csrf}, part{name: "file", filename: "", value: ""})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(res.body, "choose a file") {
		t.Fatalf("no file chosen: %d:\n%.2000s", res.StatusCode, res.body)
	}
	if n := artifactCount(t, base); n != 1 {
		t.Fatalf("%d artifacts, want the one uploaded", n)
	}
	// A urlencoded post to the upload has no file.
	if res := send(t, http.MethodPost, base+"/console/artifacts", url.Values{"csrf": {csrf}}, nil, session); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a urlencoded upload: %d", res.StatusCode)
	}
}
