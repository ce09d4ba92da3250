package tunnel

import (
	"bufio"
	"net"
	"testing"
)

// The session's reader is kept for the session's life: gorilla must use it (it does for one of
// more than 256 bytes) rather than allocate its own 4 KiB beside it, and it stays small.
func TestGuardHandsGorillaASmallReaderItKeeps(t *testing.T) {
	hub, agent := net.Pipe()
	defer hub.Close()
	defer agent.Close()
	_, rw := guard(hub, bufio.NewReadWriter(bufio.NewReader(hub), bufio.NewWriter(hub)), newFlow(Limits{}))
	if size := rw.Reader.Size(); size <= 256 || size > 1024 {
		t.Fatalf("the session reader holds %d bytes; gorilla keeps its own 4 KiB beside one of 256 or less, and more than 1 KiB is kept for nothing", size)
	}
}
