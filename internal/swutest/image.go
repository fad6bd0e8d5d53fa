package swutest

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cavaliergopher/cpio"
)

// payloadName is the one file an image carries besides its description and signature.
const payloadName = "payload.bin"

// DefaultHardware is the hardware revision an image is compatible with unless its
// ImageSpec says otherwise, and the one a Client reports unless its Config says
// otherwise: the two match, so a default image installs on a default client.
const DefaultHardware = "1.0"

// Signer holds a fresh RSA key and its self-signed certificate, made for one test. Every
// image it builds is signed with that key; a Client started with Config.CertPath set to
// CertPath accepts them.
type Signer struct {
	// CertPath is the PEM certificate file that swupdate needs as its -k argument.
	CertPath string
	keyPath  string
	dir      string
}

// NewSigner makes a 2048-bit RSA key and a self-signed certificate for it, with the
// extended key usage emailProtection that SWUpdate's CMS check requires by default, in
// a directory removed when t ends. It skips t (or fails it, see Require) when openssl is
// missing, since images are signed with `openssl cms`.
func NewSigner(t testing.TB) *Signer {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("swutest: signing key: %v", err)
	}
	// openssl req -x509 marks its certificates as a CA; doing the same keeps this
	// certificate to the shape SWUpdate's CMS check was measured with (NOTES.md).
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "swutest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("swutest: certificate: %v", err)
	}
	s := &Signer{
		CertPath: filepath.Join(dir, "cert.pem"),
		keyPath:  filepath.Join(dir, "key.pem"),
		dir:      dir,
	}
	writePEM(t, s.CertPath, "CERTIFICATE", der)
	writePEM(t, s.keyPath, "PRIVATE KEY", mustPKCS8(t, key))
	return s
}

func mustPKCS8(t testing.TB, key *rsa.PrivateKey) []byte {
	t.Helper()
	b, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("swutest: private key: %v", err)
	}
	return b
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatalf("swutest: write %s: %v", path, err)
	}
}

// ImageSpec says what an image holds. The zero value is a valid image that installs on
// a default Client.
type ImageSpec struct {
	// Version is sw-description's version (default "1.0.0").
	Version string
	// Payload is the dummy handler's image (default a few hundred bytes derived from
	// Version).
	Payload []byte
	// Hardware is the one revision listed in hardware-compatibility (default
	// DefaultHardware). Any other value makes the install fail on a default Client:
	// SWUpdate rejects the image while parsing sw-description.
	Hardware string
	// WrongSHA256 writes a sha256 into sw-description that is not the payload's, so the
	// image parses and streams but its install fails at the hash check.
	WrongSHA256 bool
}

// Image is a signed .swu: the bytes to serve and the values a DDI deploymentBase
// announces for them.
type Image struct {
	// Bytes is the .swu itself, a CPIO archive (newc, "070701") of sw-description,
	// sw-description.sig and the payload, in that order.
	Bytes []byte
	// Size is len(Bytes).
	Size int64
	// SHA1, MD5 and SHA256 are lower-case hex digests of Bytes.
	SHA1, MD5, SHA256 string
	// Version is the version written into sw-description.
	Version string
	// CertPath is the certificate that verifies the signature (the Signer's).
	CertPath string
}

// Build writes spec's sw-description, signs it with `openssl cms` and packs the .swu.
func (s *Signer) Build(t testing.TB, spec ImageSpec) *Image {
	t.Helper()
	if spec.Version == "" {
		spec.Version = "1.0.0"
	}
	if spec.Hardware == "" {
		spec.Hardware = DefaultHardware
	}
	if spec.Payload == nil {
		spec.Payload = bytes.Repeat([]byte("swutest payload "+spec.Version+"\n"), 16)
	}
	sum := sha256.Sum256(spec.Payload)
	if spec.WrongSHA256 {
		sum[0] ^= 0xff
	}
	desc := []byte(swDescription(spec.Version, spec.Hardware, hex.EncodeToString(sum[:])))
	sig := s.sign(t, desc)

	var swu bytes.Buffer
	if err := writeCPIO(&swu, []cpioFile{
		{"sw-description", desc},
		{"sw-description.sig", sig},
		{payloadName, spec.Payload},
	}); err != nil {
		t.Fatalf("swutest: pack .swu: %v", err)
	}
	b := swu.Bytes()
	sha1Sum, md5Sum, sha256Sum := sha1.Sum(b), md5.Sum(b), sha256.Sum256(b)
	return &Image{
		Bytes:    b,
		Size:     int64(len(b)),
		SHA1:     hex.EncodeToString(sha1Sum[:]),
		MD5:      hex.EncodeToString(md5Sum[:]),
		SHA256:   hex.EncodeToString(sha256Sum[:]),
		Version:  spec.Version,
		CertPath: s.CertPath,
	}
}

// swDescription is the libconfig text SWUpdate parses: one dummy-handler image, with
// the sha256 it checks while streaming the payload.
func swDescription(version, hardware, sha256Hex string) string {
	return fmt.Sprintf(`software =
{
	version = %s;
	description = "swutest image";
	hardware-compatibility: [ %s ];
	images: (
		{
			filename = %q;
			type = "dummy";
			sha256 = %q;
		}
	);
}
`, strconv.Quote(version), strconv.Quote(hardware), payloadName, sha256Hex)
}

// sign returns the detached DER CMS signature of desc, made as SWUpdate's docs make it.
func (s *Signer) sign(t testing.TB, desc []byte) []byte {
	t.Helper()
	in, err := os.CreateTemp(s.dir, "sw-description-*")
	if err != nil {
		t.Fatalf("swutest: %v", err)
	}
	defer os.Remove(in.Name())
	if _, err := in.Write(desc); err != nil {
		t.Fatalf("swutest: %v", err)
	}
	if err := in.Close(); err != nil {
		t.Fatalf("swutest: %v", err)
	}
	sigPath := in.Name() + ".sig"
	defer os.Remove(sigPath)
	cmd := exec.CommandContext(t.Context(), opensslPath, "cms", "-sign",
		"-in", in.Name(), "-out", sigPath,
		"-signer", s.CertPath, "-inkey", s.keyPath,
		"-outform", "DER", "-nosmimecap", "-binary")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("swutest: openssl cms -sign: %v: %s", err, strings.TrimSpace(string(out)))
	}
	sig, err := os.ReadFile(sigPath)
	if err != nil {
		t.Fatalf("swutest: %v", err)
	}
	return sig
}

type cpioFile struct {
	name string
	data []byte
}

// writeCPIO packs files in order as a newc ("070701") archive. cavaliergopher/cpio
// writes the crc format ("070702") only for headers given a Checksum, and does so by
// changing a package-level magic that every later header then shares (a data race
// between parallel tests, and newc headers turned into crc ones with a zero checksum);
// SWUpdate accepts newc as well and then skips the per-file checksum, leaving integrity
// to the sha256 in the signed sw-description. So no header here carries a Checksum.
func writeCPIO(w *bytes.Buffer, files []cpioFile) error {
	cw := cpio.NewWriter(w)
	for _, f := range files {
		hdr := &cpio.Header{Name: f.name, Mode: cpio.TypeReg | 0o644, Size: int64(len(f.data))}
		if err := cw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("header %s: %w", f.name, err)
		}
		if _, err := cw.Write(f.data); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return cw.Close()
}
