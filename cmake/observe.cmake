# observe.cmake - issue 15: memgrad-plan --timeline draws every policy's
# memory timeline after one run each, and fails if a measured series
# differs from the predicted one; run it for two models.
if(MG_BUILD_TESTS AND MG_BUILD_EXAMPLES)
  foreach(_m IN ITEMS resnet unet)
    add_test(NAME plan_timeline_${_m}
      COMMAND memgrad-plan --model ${_m} --depth 3 --width 8 --batch 2
              --timeline "${PROJECT_BINARY_DIR}/plan_timeline_${_m}.svg"
              --csv "${PROJECT_BINARY_DIR}/plan_timeline_${_m}")
  endforeach()
endif()
