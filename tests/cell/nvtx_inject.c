/* A minimal NVTX v3 injection library for tests: it stands in for Nsight Systems, logging every range
 * push and pop with its domain and name, so a machine without a GPU or Nsight can check which NVTX
 * ranges a process emits and how they nest.
 *
 * Build:  cc -shared -fPIC -O2 -o libnvtx_inject.so nvtx_inject.c
 * Use:    NVTX_INJECTION64_PATH=/abs/libnvtx_inject.so NVTX_INJECT_LOG_DIR=/some/dir python ...
 *
 * Each process that emits a range appends lines to NVTX_INJECT_LOG_DIR/nvtx-<pid>.log (opened on its
 * first event, reopened after fork):
 *     rank <RANK env or ->
 *     push <tid> <domain> <name>
 *     pop <tid> <domain>
 * Without NVTX_INJECT_LOG_DIR the library still attaches and handles every call but logs nothing: the
 * cost of an attached tool that does no work, for overhead measurements.
 *
 * Self-contained: the few NVTX ABI types it needs are declared below (from the NVTX v3 headers,
 * nvtxDetail/nvtxTypes.h and nvToolsExt.h), so no CUDA toolkit is needed to build it. The NVTX loader
 * dlopens this file, calls InitializeInjectionNvtx2 with its export-table getter, and we fill the
 * function slots we handle; the others stay no-ops. */

#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- NVTX ABI (stable since NVTX v2) ---------------------------------------------------------- */

typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer **NvtxFunctionTable;
typedef const void *(*NvtxGetExportTableFunc_t)(uint32_t exportTableId);

typedef struct {
    size_t struct_size;
    int (*GetModuleFunctionTable)(int module, NvtxFunctionTable *out_table, unsigned int *out_size);
} NvtxExportTableCallbacks;

enum { NVTX_ETID_CALLBACKS = 1 };
enum { NVTX_CB_MODULE_CORE = 1, NVTX_CB_MODULE_CORE2 = 5 };
enum { /* NVTX_CB_MODULE_CORE */
    NVTX_CBID_CORE_RangePushEx = 8, NVTX_CBID_CORE_RangePushA = 9, NVTX_CBID_CORE_RangePop = 11
};
enum { /* NVTX_CB_MODULE_CORE2 */
    NVTX_CBID_CORE2_DomainRangePushEx = 4,
    NVTX_CBID_CORE2_DomainRangePop = 5,
    NVTX_CBID_CORE2_DomainRegisterStringA = 10,
    NVTX_CBID_CORE2_DomainCreateA = 12
};
enum { NVTX_MESSAGE_TYPE_ASCII = 1, NVTX_MESSAGE_TYPE_REGISTERED = 3 };

typedef struct {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t colorType;
    uint32_t color;
    int32_t payloadType;
    int32_t reserved0;
    union { uint64_t ullValue; int64_t llValue; double dValue; } payload;
    int32_t messageType;
    union { const char *ascii; const void *unicode; const void *registered; } message;
} nvtxEventAttributes_t;

/* Our handles: NVTX treats domain and string handles as opaque pointers, so they point at our names. */
typedef struct { char name[128]; } Named;

/* ---- logging ---------------------------------------------------------------------------------- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;
static pid_t log_pid = 0;

static void log_line(const char *fmt, const char *domain, const char *name) {
    const char *dir = getenv("NVTX_INJECT_LOG_DIR");
    char line[512];
    int n;
    if (dir == NULL || *dir == '\0')
        return;
    pthread_mutex_lock(&log_lock);
    if (log_fd < 0 || log_pid != getpid()) { /* first event, or a forked child: its own file */
        char path[4096];
        const char *rank = getenv("RANK");
        log_pid = getpid();
        snprintf(path, sizeof path, "%s/nvtx-%d.log", dir, (int)log_pid);
        log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        n = snprintf(line, sizeof line, "rank %s\n", rank ? rank : "-");
        if (log_fd >= 0 && write(log_fd, line, (size_t)n) < 0) { /* nothing to do */ }
    }
    n = snprintf(line, sizeof line, fmt, (long)syscall(SYS_gettid), domain, name);
    if (log_fd >= 0 && n > 0 && write(log_fd, line, (size_t)n) < 0) { /* nothing to do */ }
    pthread_mutex_unlock(&log_lock);
}

static const char *message_of(const nvtxEventAttributes_t *attr) {
    if (attr == NULL)
        return "?";
    if (attr->messageType == NVTX_MESSAGE_TYPE_REGISTERED && attr->message.registered)
        return ((const Named *)attr->message.registered)->name;
    if (attr->messageType == NVTX_MESSAGE_TYPE_ASCII && attr->message.ascii)
        return attr->message.ascii;
    return "?";
}

static Named *named(const char *text) {
    Named *h = calloc(1, sizeof *h);
    if (h != NULL && text != NULL)
        strncpy(h->name, text, sizeof h->name - 1);
    return h;
}

/* ---- the handlers ----------------------------------------------------------------------------- */

static void *domain_create(const char *name) { return named(name); }

static void *register_string(void *domain, const char *text) { (void)domain; return named(text); }

static int domain_push(void *domain, const nvtxEventAttributes_t *attr) {
    log_line("push %ld %s %s\n", domain ? ((Named *)domain)->name : "-", message_of(attr));
    return 0;
}

static int domain_pop(void *domain) {
    log_line("pop %ld %s%s\n", domain ? ((Named *)domain)->name : "-", "");
    return 0;
}

static int push_ex(const nvtxEventAttributes_t *attr) { return domain_push(NULL, attr); }

static int push_a(const char *message) {
    log_line("push %ld %s %s\n", "-", message ? message : "?");
    return 0;
}

static int pop_default(void) { return domain_pop(NULL); }

static int set_slot(NvtxExportTableCallbacks const *cb, int module, unsigned int id, NvtxFunctionPointer fn) {
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!cb->GetModuleFunctionTable(module, &table, &size) || table == NULL || id > size)
        return 0;
    *table[id] = fn;
    return 1;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
    NvtxExportTableCallbacks const *cb = get_export_table(NVTX_ETID_CALLBACKS);
    if (cb == NULL || cb->struct_size < sizeof *cb)
        return 0;
    return set_slot(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)domain_create)
        && set_slot(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRegisterStringA,
                    (NvtxFunctionPointer)register_string)
        && set_slot(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)domain_push)
        && set_slot(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)domain_pop)
        && set_slot(cb, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)push_ex)
        && set_slot(cb, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)push_a)
        && set_slot(cb, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)pop_default);
}
