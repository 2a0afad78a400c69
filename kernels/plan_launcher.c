/* The native replay of a launch plan (kernels/plan_launcher.py builds and loads this module).
 *
 * A plan is the launches of one attention direction (forward, or backward: preprocess, dK/dV, dQ)
 * with every kernel parameter fixed at bind time except the tensors' data pointers. Replaying it
 * through Triton's own launcher costs, per launch, a Python call that parses every argument, a
 * data_ptr() call and a cuPointerGetAttribute() driver query per pointer, a context check and a GIL
 * release (see triton/backends/nvidia/driver.py, make_launcher). Here one call replays the whole
 * plan: each distinct tensor's data_ptr() once, then one cuLaunchKernelEx per launch with the
 * parameter block built at bind time, its pointer slots overwritten.
 *
 * The launch configuration follows Triton 3.6's launcher exactly (block = 32 * num_warps, grid x
 * scaled by num_ctas, the same launch attributes), and every parameter is passed through an 8-byte
 * slot whose low bytes hold the value (the driver reads each parameter's own size from the kernel).
 * The driver is opened with dlopen, as Triton does, so the module builds and its dry run
 * (Plan.slots) works on machines without CUDA.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "cuda.h"

typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
typedef CUresult (*error_string_fn)(CUresult error, const char **text);

static launch_ex_fn launch_ex = NULL;
static error_string_fn error_string = NULL;
static PyObject *data_ptr_name = NULL;

static int load_driver(void) {
  if (launch_ex != NULL) return 0;
  void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == NULL) {
    PyErr_Format(PyExc_RuntimeError, "plan launcher: cannot open the CUDA driver libcuda.so.1 (%s)", dlerror());
    return -1;
  }
  launch_ex = (launch_ex_fn)dlsym(lib, "cuLaunchKernelEx");
  error_string = (error_string_fn)dlsym(lib, "cuGetErrorString");
  if (launch_ex == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "plan launcher: libcuda.so.1 has no cuLaunchKernelEx (driver older than CUDA 12)");
    return -1;
  }
  return 0;
}

typedef struct {
  CUfunction function;
  unsigned int grid[3];
  unsigned int num_warps, num_ctas, shared;
  int cooperative, pdl;
  Py_ssize_t n_params;
  uint64_t *slots;      /* one 8-byte slot per kernel parameter, constants filled at bind time */
  void **params;        /* &slots[i]: what cuLaunchKernelEx reads */
  Py_ssize_t n_pointers;
  Py_ssize_t *pointer_slot;    /* the slot of each tensor parameter ... */
  Py_ssize_t *pointer_tensor;  /* ... its tensor's index in the replay's tensor tuple ... */
  int64_t *pointer_offset;     /* ... and a byte offset from that tensor's data pointer (a view's) */
} Launch;

typedef struct {
  PyObject_HEAD
  Py_ssize_t n_tensors;
  Py_ssize_t n_launches;
  Launch *launches;
  uint64_t *pointers;   /* scratch: the data pointers of one replay */
} Plan;

static void plan_free_launches(Plan *self) {
  if (self->launches != NULL) {
    for (Py_ssize_t i = 0; i < self->n_launches; i++) {
      Launch *l = &self->launches[i];
      PyMem_Free(l->slots);
      PyMem_Free(l->params);
      PyMem_Free(l->pointer_slot);
      PyMem_Free(l->pointer_tensor);
      PyMem_Free(l->pointer_offset);
    }
    PyMem_Free(self->launches);
    self->launches = NULL;
  }
  PyMem_Free(self->pointers);
  self->pointers = NULL;
}

static void plan_dealloc(Plan *self) {
  plan_free_launches(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Launch spec: (function, grid_x, grid_y, grid_z, num_warps, num_ctas, shared, cooperative, pdl,
 *               slots: bytes (8 per parameter), pointers: tuple of (slot, tensor index, byte offset)). */
static int parse_launch(Launch *l, PyObject *spec, Py_ssize_t n_tensors, Py_ssize_t index) {
  unsigned long long function;
  PyObject *slots, *pointers;
  if (!PyArg_ParseTuple(spec, "KIIIIIIppSO!;launch spec: (function, grid x, y, z, num_warps, num_ctas, shared, "
                        "cooperative, pdl, slots, pointers)",
                        &function, &l->grid[0], &l->grid[1], &l->grid[2], &l->num_warps, &l->num_ctas, &l->shared,
                        &l->cooperative, &l->pdl, &slots, &PyTuple_Type, &pointers))
    return -1;
  l->function = (CUfunction)(uintptr_t)function;
  Py_ssize_t n_bytes = PyBytes_GET_SIZE(slots);
  if (n_bytes % 8 != 0) {
    PyErr_Format(PyExc_ValueError, "launch %zd: slots must be 8 bytes per parameter, got %zd bytes", index, n_bytes);
    return -1;
  }
  if (l->num_warps == 0 || l->num_ctas == 0) {
    PyErr_Format(PyExc_ValueError, "launch %zd: num_warps and num_ctas must be positive", index);
    return -1;
  }
  l->n_params = n_bytes / 8;
  l->slots = PyMem_Calloc(l->n_params ? l->n_params : 1, sizeof(uint64_t));
  l->params = PyMem_Calloc(l->n_params ? l->n_params : 1, sizeof(void *));
  l->n_pointers = PyTuple_GET_SIZE(pointers);
  l->pointer_slot = PyMem_Calloc(l->n_pointers ? l->n_pointers : 1, sizeof(Py_ssize_t));
  l->pointer_tensor = PyMem_Calloc(l->n_pointers ? l->n_pointers : 1, sizeof(Py_ssize_t));
  l->pointer_offset = PyMem_Calloc(l->n_pointers ? l->n_pointers : 1, sizeof(int64_t));
  if (!l->slots || !l->params || !l->pointer_slot || !l->pointer_tensor || !l->pointer_offset) {
    PyErr_NoMemory();
    return -1;
  }
  memcpy(l->slots, PyBytes_AS_STRING(slots), (size_t)n_bytes);
  for (Py_ssize_t i = 0; i < l->n_params; i++) l->params[i] = &l->slots[i];
  for (Py_ssize_t i = 0; i < l->n_pointers; i++) {
    Py_ssize_t slot, tensor;
    long long offset;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(pointers, i), "nnL;pointer: (slot, tensor index, byte offset)", &slot,
                          &tensor, &offset))
      return -1;
    if (slot < 0 || slot >= l->n_params || tensor < 0 || tensor >= n_tensors) {
      PyErr_Format(PyExc_ValueError, "launch %zd: pointer (slot %zd, tensor %zd) out of range (%zd slots, %zd tensors)",
                   index, slot, tensor, l->n_params, n_tensors);
      return -1;
    }
    l->pointer_slot[i] = slot;
    l->pointer_tensor[i] = tensor;
    l->pointer_offset[i] = (int64_t)offset;
  }
  return 0;
}

static int plan_init(Plan *self, PyObject *args, PyObject *kwargs) {
  Py_ssize_t n_tensors;
  PyObject *specs;
  static char *names[] = {"n_tensors", "launches", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nO!", names, &n_tensors, &PyTuple_Type, &specs)) return -1;
  if (n_tensors < 0) {
    PyErr_SetString(PyExc_ValueError, "n_tensors must be >= 0");
    return -1;
  }
  plan_free_launches(self);
  self->n_tensors = n_tensors;
  self->n_launches = PyTuple_GET_SIZE(specs);
  self->launches = PyMem_Calloc(self->n_launches ? self->n_launches : 1, sizeof(Launch));
  self->pointers = PyMem_Calloc(n_tensors ? n_tensors : 1, sizeof(uint64_t));
  if (!self->launches || !self->pointers) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < self->n_launches; i++) {
    PyObject *spec = PyTuple_GET_ITEM(specs, i);
    if (!PyTuple_Check(spec)) {
      PyErr_Format(PyExc_TypeError, "launch %zd: spec must be a tuple", i);
      return -1;
    }
    if (parse_launch(&self->launches[i], spec, n_tensors, i) < 0) return -1;
  }
  return 0;
}

/* The data pointers of the replay's tensors into self->pointers (one data_ptr() call per distinct object). */
static int gather_pointers(Plan *self, PyObject *tensors) {
  if (!PyTuple_Check(tensors) || PyTuple_GET_SIZE(tensors) != self->n_tensors) {
    PyErr_Format(PyExc_TypeError, "plan replay takes a tuple of %zd tensors, got %s of %zd", self->n_tensors,
                 Py_TYPE(tensors)->tp_name, PyTuple_Check(tensors) ? PyTuple_GET_SIZE(tensors) : (Py_ssize_t)-1);
    return -1;
  }
  for (Py_ssize_t i = 0; i < self->n_tensors; i++) {
    PyObject *t = PyTuple_GET_ITEM(tensors, i);
    Py_ssize_t j = 0;
    while (j < i && PyTuple_GET_ITEM(tensors, j) != t) j++;
    if (j < i) {
      self->pointers[i] = self->pointers[j];
      continue;
    }
    PyObject *ptr = PyObject_CallMethodNoArgs(t, data_ptr_name);
    if (ptr == NULL) return -1;
    self->pointers[i] = PyLong_AsUnsignedLongLong(ptr);
    Py_DECREF(ptr);
    if (PyErr_Occurred()) return -1;
  }
  return 0;
}

static void fill_pointers(Plan *self, Launch *l) {
  for (Py_ssize_t i = 0; i < l->n_pointers; i++)
    l->slots[l->pointer_slot[i]] = self->pointers[l->pointer_tensor[i]] + (uint64_t)l->pointer_offset[i];
}

static PyObject *raise_cuda(CUresult status, Py_ssize_t index) {
  const char *text = NULL;
  if (error_string == NULL || error_string(status, &text) != CUDA_SUCCESS || text == NULL) text = "unknown error";
  PyErr_Format(PyExc_RuntimeError, "plan launcher: cuLaunchKernelEx failed for launch %zd: %s (CUDA error %d)", index,
               text, (int)status);
  return NULL;
}

/* plan.run(stream, tensors): the plan's launches, in order, on the raw CUDA stream. */
static PyObject *plan_run(Plan *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "run(stream, tensors) takes 2 arguments");
    return NULL;
  }
  unsigned long long stream = PyLong_AsUnsignedLongLong(args[0]);
  if (PyErr_Occurred()) return NULL;
  if (load_driver() < 0 || gather_pointers(self, args[1]) < 0) return NULL;
  for (Py_ssize_t i = 0; i < self->n_launches; i++) {
    Launch *l = &self->launches[i];
    if ((unsigned long long)l->grid[0] * l->grid[1] * l->grid[2] == 0) continue;
    fill_pointers(self, l);
    CUlaunchAttribute attrs[4];
    memset(attrs, 0, sizeof(attrs));
    unsigned int n_attrs = 0;
    if (l->pdl) {
      attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[n_attrs].value.programmaticStreamSerializationAllowed = 1;
      n_attrs++;
    }
    if (l->cooperative) {
      attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n_attrs].value.cooperative = 1;
      n_attrs++;
    }
    if (l->num_ctas != 1) {
      attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n_attrs].value.clusterDim.x = l->num_ctas;
      attrs[n_attrs].value.clusterDim.y = 1;
      attrs[n_attrs].value.clusterDim.z = 1;
      n_attrs++;
      attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
      attrs[n_attrs].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
      n_attrs++;
    }
    CUlaunchConfig config;
    memset(&config, 0, sizeof(config));
    config.gridDimX = l->grid[0] * l->num_ctas;
    config.gridDimY = l->grid[1];
    config.gridDimZ = l->grid[2];
    config.blockDimX = 32 * l->num_warps;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = l->shared;
    config.hStream = (CUstream)(uintptr_t)stream;
    config.attrs = attrs;
    config.numAttrs = n_attrs;
    CUresult status = launch_ex(&config, l->function, l->params, NULL);
    if (status != CUDA_SUCCESS) return raise_cuda(status, i);
  }
  Py_RETURN_NONE;
}

/* plan.slots(tensors): the parameter block each launch would get (list of bytes), without launching. */
static PyObject *plan_slots(Plan *self, PyObject *tensors) {
  if (gather_pointers(self, tensors) < 0) return NULL;
  PyObject *out = PyList_New(self->n_launches);
  if (out == NULL) return NULL;
  for (Py_ssize_t i = 0; i < self->n_launches; i++) {
    Launch *l = &self->launches[i];
    fill_pointers(self, l);
    PyObject *block = PyBytes_FromStringAndSize((const char *)l->slots, l->n_params * 8);
    if (block == NULL) {
      Py_DECREF(out);
      return NULL;
    }
    PyList_SET_ITEM(out, i, block);
  }
  return out;
}

static PyObject *plan_get_n_tensors(Plan *self, void *closure) { return PyLong_FromSsize_t(self->n_tensors); }
static PyObject *plan_get_n_launches(Plan *self, void *closure) { return PyLong_FromSsize_t(self->n_launches); }

static PyMethodDef plan_methods[] = {
    {"run", (PyCFunction)(void (*)(void))plan_run, METH_FASTCALL,
     "run(stream, tensors): the plan's launches, in order, with these tensors' data pointers, on the raw CUDA stream."},
    {"slots", (PyCFunction)plan_slots, METH_O,
     "slots(tensors): the parameter block (8 bytes per parameter) each launch would get; launches nothing."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef plan_getset[] = {
    {"n_tensors", (getter)plan_get_n_tensors, NULL, "tensors per replay", NULL},
    {"n_launches", (getter)plan_get_n_launches, NULL, "launches per replay", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_plan_launcher.Plan",
    .tp_doc = "Plan(n_tensors, launches): launches replayed natively with new tensors (see kernels/plan_launcher.py).",
    .tp_basicsize = sizeof(Plan),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)plan_init,
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_methods = plan_methods,
    .tp_getset = plan_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_plan_launcher", "Native replay of Triton launch plans (kernels/plan_launcher.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__plan_launcher(void) {
  data_ptr_name = PyUnicode_InternFromString("data_ptr");
  if (data_ptr_name == NULL || PyType_Ready(&PlanType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (m == NULL) return NULL;
  Py_INCREF(&PlanType);
  if (PyModule_AddObject(m, "Plan", (PyObject *)&PlanType) < 0) {
    Py_DECREF(&PlanType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
