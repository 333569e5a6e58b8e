/*
 * landlock.h - the box's Landlock wall (landlock.c): which ABI this kernel
 * has, the ruleset a box's init builds after its pivot, and the one call a
 * stage program makes before seccomp.
 *
 * Debian 12's kernel headers are 6.1's (ABI 3): what later ABIs added is
 * defined here when the header lacks it.
 */
#ifndef MOAT_LANDLOCK_H
#define MOAT_LANDLOCK_H

#include <linux/landlock.h>
#include <stddef.h>
#include <stdint.h>

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13) /* ABI 2 */
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0) /* ABI 4 */
#endif
#ifndef LANDLOCK_ACCESS_NET_CONNECT_TCP
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1) /* ABI 4 */
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#endif
#ifndef LANDLOCK_SCOPE_SIGNAL
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1) /* ABI 6 */
#endif

/*
 * At start-up, before any box: the kernel's Landlock ABI, remembered for
 * every box this process makes (landlock_abi()).  enabled 0 (--no-landlock)
 * records 0 whatever the kernel has.  Returns the ABI, or 0 with the reason
 * in why (the kernel lacks Landlock, it is off at boot, or switched off).
 */
int landlock_setup(int enabled, char *why, size_t whylen);

/* The ABI boxes use: 0 when the wall is missing. */
int landlock_abi(void);

/*
 * In a box's init, after the pivot (the paths are the box's own): a ruleset
 * for abi allowing what the rules in landlock.c name, with the nro runtime
 * paths of the plan read-only and executable.  A descriptor (close-on-exec),
 * or -1 with errno and *what naming the step.  No allocation.
 */
int landlock_build(int abi, char *const *ro, uint32_t nro, const char **what);

/* In the stage program, after no_new_privs, before seccomp: enforce the
 * ruleset on this process and what it starts, then close it.  0 or -1. */
int landlock_enforce(int ruleset_fd);

#endif
