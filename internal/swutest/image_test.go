package swutest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
)

// entries reads an image back: each file's name, data and raw header magic.
func entries(t *testing.T, swu []byte) (names []string, data map[string][]byte, magics []string) {
	t.Helper()
	data = map[string][]byte{}
	r := cpio.NewReader(bytes.NewReader(swu))
	for {
		hdr, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read .swu: %v", err)
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		data[hdr.Name] = b
	}
	// Walk the raw headers too: 110 bytes of ASCII hex, the name padded to 4 bytes,
	// the data padded to 4 bytes.
	pad4 := func(n int) int { return (n + 3) &^ 3 }
	for off := 0; off+110 <= len(swu); {
		hdr := swu[off : off+110]
		magics = append(magics, string(hdr[:6]))
		size, err1 := strconv.ParseInt(string(hdr[54:62]), 16, 64)
		nameSize, err2 := strconv.ParseInt(string(hdr[94:102]), 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("header at %d: %q", off, hdr)
		}
		if string(swu[off+110:off+110+int(nameSize)-1]) == "TRAILER!!!" {
			break
		}
		off = pad4(off+110+int(nameSize)) + pad4(int(size))
	}
	return names, data, magics
}

func TestBuildWritesSignedNewcArchive(t *testing.T) {
	t.Parallel()
	signer := NewSigner(t)
	img := signer.Build(t, ImageSpec{Version: "4.2.0", Payload: []byte("hello")})

	names, data, magics := entries(t, img.Bytes)
	if want := []string{"sw-description", "sw-description.sig", "payload.bin"}; !slices.Equal(names, want) {
		t.Fatalf("archive order = %q, want %q", names, want)
	}
	// Three files and the trailer, every header newc (see writeCPIO).
	if !slices.Equal(magics, []string{"070701", "070701", "070701", "070701"}) {
		t.Errorf("header magics = %q", magics)
	}
	desc := string(data["sw-description"])
	sum := sha256.Sum256([]byte("hello"))
	for _, want := range []string{`version = "4.2.0";`, `hardware-compatibility: [ "1.0" ];`, `type = "dummy";`,
		`sha256 = "` + hex.EncodeToString(sum[:]) + `";`} {
		if !strings.Contains(desc, want) {
			t.Errorf("sw-description lacks %s:\n%s", want, desc)
		}
	}
	if s := sha1.Sum(img.Bytes); img.SHA1 != hex.EncodeToString(s[:]) || img.Size != int64(len(img.Bytes)) {
		t.Errorf("SHA1 %s, Size %d do not describe the bytes", img.SHA1, img.Size)
	}

	// The signature verifies against the certificate alone, with the purpose SWUpdate
	// checks.
	dir := t.TempDir()
	descPath, sigPath := filepath.Join(dir, "sw-description"), filepath.Join(dir, "sw-description.sig")
	os.WriteFile(descPath, data["sw-description"], 0o600)
	os.WriteFile(sigPath, data["sw-description.sig"], 0o600)
	out, err := exec.Command(opensslPath, "cms", "-verify", "-binary", "-inform", "DER", "-in", sigPath,
		"-content", descPath, "-CAfile", img.CertPath, "-purpose", "smimesign", "-out", os.DevNull).CombinedOutput()
	if err != nil {
		t.Errorf("openssl cms -verify: %v: %s", err, out)
	}

	bad := signer.Build(t, ImageSpec{Payload: []byte("hello"), WrongSHA256: true, Hardware: "9.9"})
	_, badData, _ := entries(t, bad.Bytes)
	if d := string(badData["sw-description"]); strings.Contains(d, hex.EncodeToString(sum[:])) || !strings.Contains(d, `[ "9.9" ]`) {
		t.Errorf("failing image's sw-description:\n%s", d)
	}
}
