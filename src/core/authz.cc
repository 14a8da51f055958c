// Tenant authorization, SEMANTICS Z1-Z4: a pure function of the principal and the target.
#include <string>

#include "runnel/registry.h"

namespace runnel {

Status CheckStreamAccess(const Principal& principal, const StreamScope& target,
                         std::string_view stream) {
  // Z1: a principal acts in its own scope (tenant -> that tenant, platform -> global) freely.
  if (StreamScope::FromPrincipal(principal.tenant) == target) return Status::OK();
  // Z3: the capability opens every other scope.
  if (principal.cross_tenant) return Status::OK();
  // Z2: every other pair, including platform -> tenant, is denied. The message names only what
  // the caller already knows, never whether the stream exists (Z4).
  const std::string who = principal.tenant ? "tenant:" + *principal.tenant : "platform";
  return Status::PermissionDenied(who + " may not access stream '" + std::string(stream) + "' in " +
                                  target.Label() + " without the stream:cross-tenant capability");
}

}  // namespace runnel
