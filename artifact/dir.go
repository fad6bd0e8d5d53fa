package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// dir keeps artifacts' bytes as files in a directory, one a key. An upload is written
// to a temporary file in the same directory (so that the rename is atomic), synced,
// then renamed to its key, and the directory synced: once put returns, the file is
// there whole, across a crash.
type dir struct {
	path string
}

// tempPrefix begins the names of uploads being written.
const tempPrefix = ".upload-"

// staleUpload is how old a temporary file must be before prepare removes it: one that
// old was left by a crash (an upload in progress, on this node or another sharing the
// directory, writes to its file all along).
const staleUpload = 24 * time.Hour

// writeIdle is how long a device's download may take to accept more bytes before the
// server gives it up (the server's own write timeout is pushed on as bytes go).
const writeIdle = 2 * time.Minute

func (d *dir) name() string { return "dir" }

func (d *dir) where() string {
	if abs, err := filepath.Abs(d.path); err == nil {
		return abs
	}
	return d.path
}

func (d *dir) prepare(ctx context.Context) error {
	if err := os.MkdirAll(d.path, 0o750); err != nil {
		return fmt.Errorf("DISPATCH_ARTIFACT_DIR: %w", err)
	}
	probe, err := os.CreateTemp(d.path, tempPrefix+"probe-*")
	if err != nil {
		return fmt.Errorf("DISPATCH_ARTIFACT_DIR: cannot write there: %w", err)
	}
	probe.Close()
	os.Remove(probe.Name())
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return fmt.Errorf("DISPATCH_ARTIFACT_DIR: %w", err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleUpload {
			os.Remove(filepath.Join(d.path, e.Name()))
		}
	}
	return nil
}

func (d *dir) file(key string) string { return filepath.Join(d.path, key) }

func (d *dir) put(ctx context.Context, key string, r io.Reader, size int64) (err error) {
	f, err := os.CreateTemp(d.path, tempPrefix+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = io.Copy(f, r); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), d.file(key)); err != nil {
		return err
	}
	if err = syncDir(d.path); err != nil {
		os.Remove(d.file(key))
		return err
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (d *dir) remove(ctx context.Context, key string) error {
	err := os.Remove(d.file(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (d *dir) serve(w http.ResponseWriter, r *http.Request, a taskd.Artifact) error {
	f, err := os.Open(d.file(a.Key))
	if err != nil {
		// Another node's directory, not shared with this one, or a file removed by hand.
		return taskd.Unavailable("artifact storage (dir)", fmt.Errorf("artifact %d: %w", a.ID, err))
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", disposition(a.Filename))
	http.ServeContent(&extending{ResponseWriter: w, rc: http.NewResponseController(w)}, r, "", a.CreatedAt, f)
	return nil
}

// extending pushes the server's write deadline on while a download's bytes go out (at
// most once a second): the server's write timeout suits API replies, not a gigabyte
// to a slow device. A device that accepts nothing for writeIdle is given up.
type extending struct {
	http.ResponseWriter
	rc    *http.ResponseController
	moved time.Time
}

func (e *extending) Write(p []byte) (int, error) {
	if now := time.Now(); now.Sub(e.moved) >= time.Second {
		e.rc.SetWriteDeadline(now.Add(writeIdle)) // not every writer supports it (tests' recorders); then none
		e.moved = now
	}
	return e.ResponseWriter.Write(p)
}
