package lockfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestAcquire(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	// A file left behind by a dead holder does not block.
	if err := os.WriteFile(path, []byte("999999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to open files, so a second Acquire in this process is refused too.
	_, err = Acquire(path)
	var inUse *InUseError
	if !errors.As(err, &inUse) || !errors.Is(err, ErrInUse) || inUse.PID != os.Getpid() {
		t.Fatalf("second Acquire: got %v, want an InUseError naming PID %d", err, os.Getpid())
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Acquire(path)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	if err := again.Release(); err != nil {
		t.Fatal(err)
	}
}
