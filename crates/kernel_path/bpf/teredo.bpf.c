// SPDX-License-Identifier: MIT OR Apache-2.0
//
// shipworm's kernel data path: packets of peers the relay's or the client's state
// machine already trusts, moved without leaving the kernel. Every decision stays in
// userland; these programs only look a peer up in the map userland fills, check that
// the packet is the plainest kind (a whole IPv6 packet, no trailers, no bubble, a
// destination the role may serve without more thought), and move it. Anything else
// goes on, untouched, to the socket or the TUN, where the daemon handles it as if these
// programs were not there.
//
// One object, a file per program over a shared header: shared.h (maps, layouts,
// address judgements), routes.h (route verdicts), decap.h (XDP), encap.h (tc egress),
// ingress.h (tc ingress), guard.h (the Teredo interface's ingress: IPv6 only).

#include "shared.h"
#include "routes.h"
#include "decap.h"
#include "encap.h"
#include "ingress.h"
#include "guard.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";
