package server

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/cli"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

// newKubeconfigCommand returns "mount-apiserver kubeconfig": a kubeconfig with a new client
// certificate of the standalone CA, for a user and groups of the caller's choosing.
func newKubeconfigCommand() *cobra.Command {
	var rootDir, certDir, userName string
	var groups []string
	cmd := &cobra.Command{
		Use:   "kubeconfig --user NAME [--group GROUP ...]",
		Short: "Print a kubeconfig for a new user of a standalone server",
		Long: fmt.Sprintf(`Prints a kubeconfig with a client certificate (valid for a year) for --user in the --group
groups, signed by the standalone server's CA under --root-directory, for the server that
admin.kubeconfig there names. What the user may do follows from the groups:

  %s  everything, including lending a mount's credentials as they are
  %s  manage mounts and Secrets, proxy through mounts with every verb
  %s  read mounts, proxy read requests (get)
  %s<name>  attach to mount <name> as its agent, nothing else

A user in none of them may only read discovery and ask about themselves (kubectl auth whoami,
auth can-i). Other groups of the %s prefix are refused: a typo would grant nothing.
Through Impersonate mounts every user reaches the targets under their own name and groups;
the targets' RBAC decides there.`,
			authorization.AdminsGroup, authorization.EditorsGroup, authorization.ViewersGroup, authorization.AgentGroupPrefix, authorization.GroupPrefix),
		Example: "  mount-apiserver kubeconfig --user alice --group " + authorization.EditorsGroup + " > alice.kubeconfig\n" +
			"  mount-apiserver kubeconfig --user edge-agent --group " + authorization.AgentGroupPrefix + "edge > edge-agent.kubeconfig",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if userName == "" {
				return fmt.Errorf("--user is required")
			}
			for _, g := range groups {
				if err := authorization.ValidateGroup(g); err != nil {
					return fmt.Errorf("--group: %w", err)
				}
			}
			if certDir == "" {
				certDir = filepath.Join(rootDir, "pki")
			}
			admin, err := clientcmd.LoadFromFile(filepath.Join(rootDir, options.AdminKubeconfigFile))
			if err != nil {
				return fmt.Errorf("reading the admin kubeconfig (has the server run with --root-directory %s?): %w", rootDir, err)
			}
			ctx, ok := admin.Contexts[admin.CurrentContext]
			if !ok || admin.Clusters[ctx.Cluster] == nil {
				return fmt.Errorf("the admin kubeconfig under %s names no cluster", rootDir)
			}
			cluster := admin.Clusters[ctx.Cluster]
			ca, err := pki.Load(certDir)
			if err != nil {
				return err
			}
			data, err := ca.UserKubeconfig(cluster.Server, userName, groups, len(cluster.CertificateAuthorityData) > 0)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
	cli.OwnHelp(cmd)
	cmd.Flags().StringVar(&rootDir, "root-directory", options.DefaultRootDirectory, "The standalone server's root directory.")
	cmd.Flags().StringVar(&certDir, "cert-dir", "", "Directory of the server's CA, if not <root-directory>/pki.")
	cmd.Flags().StringVar(&userName, "user", "", "User name (the certificate's common name).")
	cmd.Flags().StringSliceVar(&groups, "group", nil, "Groups (the certificate's organizations); repeat or separate by commas.")
	return cmd
}
