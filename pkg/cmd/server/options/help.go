package options

import (
	"strings"

	cliflag "k8s.io/component-base/cli/flag"
)

// helpFixes rewrite upstream flag help that is wrong for this server: flag name, then the
// fragments to replace, in pairs. An upstream wording change leaves the help as it was; the
// command's --help test notices.
var helpFixes = map[string][]string{
	// The examples name the sample-apiserver's component; only "kube" exists here.
	"emulated-version":          {"'--emulated-version=wardle=1.2,kube=1.31'", "'--emulated-version=kube=1.36'"},
	"min-compatibility-version": {"'--min-compatibility-version=wardle=1.2,kube=1.31'", "'--min-compatibility-version=kube=1.36'"},
	"feature-gates": {
		"For example: --feature-gates 'wardle:featureA=true,wardle:featureB=false' --feature-gates 'kube:featureC=true'",
		"For example: --feature-gates 'ListFromCacheSnapshot=true,kube:APIResponseCompression=false'. ",
	},
	// The certificates are generated below the root directory, and signed by a generated CA.
	"cert-dir": {
		"The directory where the TLS certs are located. If --tls-cert-file and --tls-private-key-file are provided, this flag will be ignored.",
		"Directory of the generated CA, serving certificate and admin client certificate; the CA authenticates clients in standalone mode even with --tls-cert-file. Defaults to <root-directory>/pki.",
	},
	"tls-cert-file": {
		"a self-signed certificate and key are generated for the public address and saved to the directory specified by --cert-dir.",
		"a serving certificate signed by the generated CA is written to --cert-dir, for localhost, loopback, --bind-address and --serving-cert-hosts.",
	},
	// CachingCertificates remembers verified client certificates for this TTL too.
	"authentication-token-webhook-cache-ttl": {
		"The duration to cache responses from the webhook token authenticator.",
		"The duration to cache responses from the webhook token authenticator (TokenReview), and to remember a verified client certificate for its connection. 0 turns both caches off.",
	},
}

// fixHelp applies helpFixes to the flags in fss.
func fixHelp(fss *cliflag.NamedFlagSets) {
	for _, fs := range fss.FlagSets {
		for name, fix := range helpFixes {
			if f := fs.Lookup(name); f != nil {
				for i := 0; i+1 < len(fix); i += 2 {
					f.Usage = strings.Replace(f.Usage, fix[i], fix[i+1], 1)
				}
			}
		}
	}
}
