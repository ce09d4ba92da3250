package authorization

import (
	"fmt"
	"slices"
	"strings"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
)

// GroupPrefix starts every group the standalone server knows.
const GroupPrefix = "mount-apiserver:"

// ValidateGroup refuses a group for a new user of the standalone server that would grant
// nothing it seems to: a group of GroupPrefix that is not one of Groups or an agent group of
// a mount name (mount-apiserver:admin would be accepted silently and grant nothing), and the
// groups of system:, which are the server's own. Other groups are the user's, for the targets
// of Impersonate mounts.
func ValidateGroup(group string) error {
	switch {
	case group == "":
		return fmt.Errorf("empty group")
	case strings.HasPrefix(group, "system:"):
		return fmt.Errorf("%q: the groups of system: are the server's own; %s may do everything", group, AdminsGroup)
	case !strings.HasPrefix(group, GroupPrefix), slices.Contains(Groups, group):
		return nil
	}
	if name, ok := strings.CutPrefix(group, AgentGroupPrefix); ok {
		if msgs := utilvalidation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			return fmt.Errorf("%q: %q is not a mount name: %s", group, name, strings.Join(msgs, "; "))
		}
		return nil
	}
	return fmt.Errorf("%q is not a group of the standalone server; its groups are %s and %s<mount name>", group, strings.Join(Groups, ", "), AgentGroupPrefix)
}
