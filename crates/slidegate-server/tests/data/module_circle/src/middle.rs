pub struct Middle;

impl Middle {
    pub fn back(&self) -> crate::back::Back {
        crate::back::Back
    }
}
