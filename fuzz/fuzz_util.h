/* fuzz_util.h — helpers of the targets that need more than a function call:
 * a scratch directory for stores and files, a reader that cuts an input
 * into a sequence of requests (or replies), and an rpc.h server in this
 * process whose answers come from the input, for the client-side targets. */
#ifndef PC_FUZZ_FUZZ_UTIL_H
#define PC_FUZZ_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

/* A new directory under $TMPDIR (or /tmp), removed with its contents when the
 * process exits normally; fuzz/run.sh removes it after a crash. */
const char *fuzz_scratch_dir(void);

/* Removes path and everything under it (a store a target is done with). */
void fuzz_remove_tree(const char *path);

/* An input read as a sequence of chunks: u8 tag, u16 length (big-endian),
 * then that many bytes (fewer when the input ends first). */
typedef struct fuzz_chunks {
  const uint8_t *p;
  size_t len, pos;
} fuzz_chunks_t;

/* The next chunk: 1 with *tag and body[0..*n), 0 when the input is used up. */
int fuzz_next_chunk(fuzz_chunks_t *c, uint8_t *tag, const char **body, size_t *n);

/* Starts (once per process) an rpc.h server on 127.0.0.1 serving in process:
 * every client created afterwards for the returned port calls it without a
 * socket. It answers each request with the next chunk of the current
 * script: status = tag when tag <= PC_UNKNOWN (else PC_OK), reply = body;
 * PC_UNAVAILABLE once the script is used up. */
uint16_t fuzz_fake_server_port(void);
void fuzz_fake_script(const uint8_t *data, size_t size);
/* Requests the fake server answered since the last fuzz_fake_script. */
size_t fuzz_fake_calls(void);

#endif
