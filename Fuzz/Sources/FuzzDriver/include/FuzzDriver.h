// libFuzzer's entry for programs that have their own `main` (compiler-rt FuzzerInterface.h).
// SwiftPM links an executable target's `main` to `<Target>_main`, so each fuzz target defines
// that function and hands its arguments to libFuzzer here.
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*UserCb)(const uint8_t *Data, size_t Size));
