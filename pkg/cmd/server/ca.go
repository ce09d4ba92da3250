package server

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kcp-dev/mount-apiserver/pkg/cli"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
)

// newCACommand returns "mount-apiserver ca": the generated PKI of a root directory, created
// if it is not there yet, and its CA printed. Whatever must trust the server before it first
// starts (kcp's --shard-virtual-workspace-ca-file, a front-proxy mapping's backend CA, an
// APIService's caBundle) gets it from here; the server started later on the same root
// directory serves with it.
func newCACommand() *cobra.Command {
	o := options.NewOptions()
	cmd := &cobra.Command{
		Use:   "ca [--root-directory DIR] [--serving-cert-hosts NAME,...]",
		Short: "Create the generated certificates of a root directory and print their CA",
		Long: `Creates the CA and the serving certificate that mount-apiserver generates under
<root-directory>/pki, unless they exist, and prints the CA certificate (PEM). The serving
certificate covers localhost, the loopback addresses and --serving-cert-hosts; run this
before the server's first start with the names the server's clients (kcp's shard and
front-proxy, the host's aggregator) reach it by.`,
		Example: "  mount-apiserver ca --root-directory .mount-apiserver --serving-cert-hosts mounts.example.com > mount-apiserver-ca.crt",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			completed, err := o.Complete()
			if err != nil {
				return err
			}
			ca, err := completed.EnsurePKI()
			if err != nil {
				return err
			}
			if _, err := cmd.OutOrStdout().Write(ca.CACertPEM); err != nil {
				return fmt.Errorf("writing the CA: %w", err)
			}
			return nil
		},
	}
	cli.OwnHelp(cmd)
	fs := cmd.Flags()
	fs.StringVar(&o.RootDirectory, "root-directory", o.RootDirectory, "The server's --root-directory.")
	fs.StringSliceVar(&o.ServingCertHosts, "serving-cert-hosts", o.ServingCertHosts, "The server's --serving-cert-hosts: names and IPs the serving certificate covers besides localhost and loopback.")
	fs.IPVar(&o.SecureServing.BindAddress, "bind-address", o.SecureServing.BindAddress, "The server's --bind-address, which the serving certificate covers too.")
	return cmd
}
