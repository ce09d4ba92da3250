package lockfile

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrInUse is returned by Acquire when another process holds the lock.
var ErrInUse = errors.New("in use")

// InUseError says which process holds a lock.
type InUseError struct {
	Path string
	// PID is the holder's process ID as it wrote it, 0 if unknown.
	PID int
}

func (e *InUseError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("%s is locked by another process", e.Path)
	}
	return fmt.Sprintf("%s is locked by process %d", e.Path, e.PID)
}

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// Lock is a held lock.
type Lock struct {
	f *os.File
}

// Acquire takes the lock on path, creating the file, without waiting: it fails with an
// *InUseError at once when another process (or another Acquire in this one) holds it. A file
// left by a process that died is no obstacle: its lock died with it. The holder's PID is
// written into the file for the error message of the next one.
func Acquire(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := tryLock(f); err != nil {
		data, _ := os.ReadFile(path)
		_ = f.Close()
		if errors.Is(err, errWouldBlock) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
			return nil, &InUseError{Path: path, PID: pid}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up. The file stays: removing it would let a process that opened it
// before the removal and one that creates it anew both hold a lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
