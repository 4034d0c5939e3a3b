// Only the declaration in include/FuzzDriver.h is needed; libFuzzer defines the function.
#include "FuzzDriver.h"
