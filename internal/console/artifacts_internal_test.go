package console

import "testing"

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 4000: "3.9 KiB",
		1<<20 - 1: "1.0 MiB", 1536 << 20: "1.5 GiB", 5 << 40: "5.0 TiB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
