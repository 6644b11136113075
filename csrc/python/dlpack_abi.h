#pragma once
// The slice of the DLPack C ABI (v0.8, the unversioned "dltensor" capsule) that the aiter_mha binding consumes and
// produces. Written from the published layout so the binding needs no dlpack package; field order and widths must
// match the standard exactly because these structs cross library boundaries (torch, CuPy, JAX, NumPy).

#include <cstdint>

extern "C" {

// Device kinds this binding names; the enum is open, other values pass through as plain integers.
enum DLDeviceType : int32_t
{
    kDLCPU         = 1,
    kDLCUDA        = 2,
    kDLCUDAHost    = 3,
    kDLCUDAManaged = 13,
};

struct DLDevice
{
    int32_t device_type; // a DLDeviceType value (an int-sized C enum in the standard header)
    int32_t device_id;
};

enum DLDataTypeCode : uint8_t
{
    kDLInt    = 0,
    kDLUInt   = 1,
    kDLFloat  = 2,
    kDLBfloat = 4,
};

struct DLDataType
{
    uint8_t code;   // a DLDataTypeCode
    uint8_t bits;   // bits per lane: 16 for fp16 / bf16, 32 for fp32
    uint16_t lanes; // 1 for scalar element types
};

struct DLTensor
{
    void* data; // base pointer; the first element lives at (char*)data + byte_offset
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t* shape;       // [ndim]
    int64_t* strides;     // [ndim] in elements, or nullptr for a compact row-major tensor
    uint64_t byte_offset;
};

struct DLManagedTensor
{
    DLTensor dl_tensor;
    void* manager_ctx;                          // producer-owned state
    void (*deleter)(struct DLManagedTensor* self); // the consumer calls this exactly once when done (may be null)
};

} // extern "C"

// Capsule names fixed by the Python DLPack protocol: a fresh capsule is "dltensor"; the consumer renames it to
// "used_dltensor" once it has taken ownership, so the producer's capsule destructor no longer calls the deleter.
constexpr const char* kDLTensorCapsuleName     = "dltensor";
constexpr const char* kUsedDLTensorCapsuleName = "used_dltensor";
