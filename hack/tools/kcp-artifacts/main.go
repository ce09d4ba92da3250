package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kcp-dev/mount-apiserver/pkg/generated/openapi"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp/export"
)

func main() {
	dir := flag.String("output-dir", "artifacts/kcp", "directory of the kcp bundle to write the generated files into")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintf(os.Stderr, "kcp-artifacts: %v\n", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	files, err := export.Files(openapi.GetOpenAPIDefinitions)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", f.Name, err)
		}
	}
	return nil
}
