package integration

import (
	"os"
	"testing"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestMain removes the binaries the tests built once they are done.
func TestMain(m *testing.M) {
	os.Exit(framework.Main(m))
}
